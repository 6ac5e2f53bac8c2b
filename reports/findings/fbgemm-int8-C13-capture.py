"""fbgemm i8i8bf16 under CUDA-graph capture with its scale held on the device, as a serving stack holds it: the op
takes the scale as a host float, so the call must read the device scale (a sync) inside the capture. Needs torch and
fbgemm-gpu-genai. Exit 1: the capture fails."""
import sys, torch, fbgemm_gpu.experimental.gen_ai  # noqa: F401 -- registers torch.ops.fbgemm
a = torch.randint(-128, 128, (8, 512), dtype=torch.int8, device="cuda")
b = torch.randint(-128, 128, (256, 512), dtype=torch.int8, device="cuda")
scale = torch.tensor(0.001, device="cuda")  # the product s_a * s_w of a per-tensor quantization
torch.ops.fbgemm.i8i8bf16(a, b, float(scale), 1); torch.cuda.synchronize()  # eager: fine
g = torch.cuda.CUDAGraph()
try:
    with torch.cuda.graph(g):
        y = torch.ops.fbgemm.i8i8bf16(a, b, float(scale), 1)
except Exception as e:
    print("capture failed:", type(e).__name__, str(e).splitlines()[0]); sys.exit(1)
print("captured: the scale is baked in as", float(scale)); sys.exit(0)
