"""A randomly initialised Hugging Face Llama small enough for the CPU (no download)."""
import torch


def llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(
        vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=16, use_cache=False, tie_word_embeddings=False))
