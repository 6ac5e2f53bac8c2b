"""The prepared artifact of reference/model/assets/default_model (detllm.json + detllm.safetensors).

Rebuild: detllm prepare --out detllm/assets/default_artifact
"""
