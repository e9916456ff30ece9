"""The character tokenizer (grpo_edge.runtime.char_tokenizer, the module that also ships to devices) and
the torch helper the trainer needs on top of it."""
from grpo_edge.runtime.char_tokenizer import BOS, EOS, PAD, SPECIALS, CharTokenizer  # noqa: F401


def encode_targets(tokenizer, texts):
    """Target texts -> (ids (B, T) long: text + EOS then PAD, mask (B, T) float: 1 up to and with EOS)."""
    import torch
    seqs = [tokenizer.encode(t, eos=True) for t in texts]
    width = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), width), PAD, dtype=torch.long)
    mask = torch.zeros(len(seqs), width)
    for i, s in enumerate(seqs):
        ids[i, :len(s)] = torch.tensor(s, dtype=torch.long)
        mask[i, :len(s)] = 1.0
    return ids, mask

