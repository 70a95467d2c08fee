"""The inference TraceLens recorded on an H100 (tests/data/gpu_traces/tracelens_h100/bert_small_inference_h100):
gaunernst/bert-small-uncased (BertLMHeadModel: 4 layers, 512 wide, 8 heads) in bfloat16 answering one
141-token prompt under inference_mode, the output dropped after each call as the harness drops it. Random
weights: what a GPU holds depends on the shapes, not the values."""
import torch
from transformers import BertConfig, BertLMHeadModel

device = "cuda" if torch.cuda.is_available() else "cpu"
config = BertConfig(vocab_size=30522, hidden_size=512, num_hidden_layers=4, num_attention_heads=8,
                    intermediate_size=2048, max_position_embeddings=512, is_decoder=True)
model = BertLMHeadModel(config).to(device=device, dtype=torch.bfloat16).eval()
input_ids = torch.randint(0, config.vocab_size, (1, 141), device=device)
attention_mask = torch.ones_like(input_ids)
with torch.inference_mode():
    for _ in range(20):
        model(input_ids=input_ids, attention_mask=attention_mask)
