"""Write a Qwen3-shaped random model with the default tokenizer (paper-scale run helper)."""
import shutil, sys
from pathlib import Path
from reference.model.checkpoint import write_random_qwen3
from reference.model.assets import default_model_dir
out = Path(sys.argv[1]); big = sys.argv[2] == "big"
kw = dict(vocab_size=4096, hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
          num_attention_heads=16, num_key_value_heads=8, head_dim=128) if big else \
     dict(vocab_size=4096, hidden_size=256, intermediate_size=768, num_hidden_layers=2)
write_random_qwen3(out, seed=0, **kw)
for f in ("tokenizer.json", "tokenizer_config.json"):
    shutil.copy(default_model_dir() / f, out / f)
print("wrote", out)
