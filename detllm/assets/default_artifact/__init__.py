"""The prepared artifact of reference/assets/default_model (detllm.json + detllm.safetensors).

Rebuild: detllm prepare --out detllm/assets/default_artifact
"""
