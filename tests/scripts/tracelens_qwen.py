"""The inference TraceLens recorded on an H100 (tests/data/gpu_traces/tracelens_h100/qwen_0.5b_inference_h100):
Qwen/Qwen1.5-0.5B-Chat's decoder (Qwen2Model: 24 layers, 1024 wide, 16 heads, no LM head) built from its
configuration with random weights, in bfloat16, on a batch of 16 prompts of 559 tokens under inference_mode,
causal attention through scaled_dot_product_attention. Slow on a CPU (a few seconds a call on 2 cores):
benchmarks/bench_memory_gpu.py runs it, not the test suite."""
import torch
from transformers import Qwen2Config, Qwen2Model

device = "cuda" if torch.cuda.is_available() else "cpu"
config = Qwen2Config(vocab_size=151936, hidden_size=1024, intermediate_size=2816, num_hidden_layers=24,
                     num_attention_heads=16, num_key_value_heads=16, max_position_embeddings=32768,
                     rope_theta=1000000.0, tie_word_embeddings=True, attn_implementation="sdpa")
model = Qwen2Model(config).to(device=device, dtype=torch.bfloat16).eval()
input_ids = torch.randint(0, config.vocab_size, (16, 559), device=device)
attention_mask = torch.ones_like(input_ids)
with torch.inference_mode():
    for _ in range(20):
        model(input_ids=input_ids, attention_mask=attention_mask)
