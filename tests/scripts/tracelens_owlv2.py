"""The inference TraceLens recorded on an H100 (tests/data/gpu_traces/tracelens_h100/owlv2_inference_h100):
google/owlv2-large-patch14-ensemble (Owlv2ForObjectDetection: a ViT-L/14 vision tower, 24 layers 1024 wide, on
a 1008 x 1008 image, 5185 positions; a 12-layer 768-wide text tower on one 5-token query) built from its
configuration with random weights, in bfloat16, under inference_mode, attention as the trace ran it (eager:
bmm and softmax over 16 x 5185 x 5185 weights). Slow on a CPU (tens of seconds a call on 2 cores):
benchmarks/bench_memory_gpu.py runs it, not the test suite."""
import torch
from transformers import Owlv2Config, Owlv2ForObjectDetection

device = "cuda" if torch.cuda.is_available() else "cpu"
config = Owlv2Config(
    text_config={"hidden_size": 768, "intermediate_size": 3072, "num_attention_heads": 12, "num_hidden_layers": 12},
    vision_config={"hidden_size": 1024, "intermediate_size": 4096, "num_attention_heads": 16, "num_hidden_layers": 24,
                   "image_size": 1008, "patch_size": 14},
    projection_dim=768)
config._attn_implementation = "eager"
model = Owlv2ForObjectDetection(config).to(device=device, dtype=torch.bfloat16).eval()
input_ids = torch.randint(0, config.text_config.vocab_size, (1, 5), device=device)
attention_mask = torch.ones_like(input_ids)
pixel_values = torch.randn(1, 3, 1008, 1008, device=device, dtype=torch.bfloat16)
with torch.inference_mode():
    for _ in range(20):
        model(input_ids=input_ids, pixel_values=pixel_values, attention_mask=attention_mask)
