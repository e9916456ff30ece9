"""Character-level tokenizer for the built-in text tasks (Python 3.6 safe; standard library only).

Shipped unchanged next to the text generator (textgen.py) in text-model deploy folders.

Ids: PAD=0, BOS=1, EOS=2, then one id per character in `chars`. Stored in checkpoints as plain
strings/lists (``to_dict``), so ``torch.load(..., weights_only=True)`` can read it back.
"""

PAD, BOS, EOS = 0, 1, 2
SPECIALS = ["<pad>", "<bos>", "<eos>"]


class CharTokenizer(object):
    def __init__(self, chars):
        chars = "".join(sorted(set(chars)))
        self.chars = chars
        self.itos = list(SPECIALS) + list(chars)
        self.stoi = {c: i + len(SPECIALS) for i, c in enumerate(chars)}

    @property
    def vocab_size(self):
        return len(self.itos)

    def encode(self, text, bos=False, eos=False):
        unknown = [c for c in text if c not in self.stoi]
        if unknown:
            raise ValueError("characters not in the vocabulary: %r" % "".join(sorted(set(unknown))))
        ids = [self.stoi[c] for c in text]
        return ([BOS] if bos else []) + ids + ([EOS] if eos else [])

    def decode(self, ids):
        """Decode ids up to the first EOS; PAD and BOS are dropped."""
        out = []
        for i in ids:
            i = int(i)
            if i == EOS:
                break
            if i >= len(SPECIALS):
                out.append(self.itos[i])
        return "".join(out)

    def to_dict(self):
        return {"type": "char", "chars": self.chars}

    @classmethod
    def from_dict(cls, d):
        if d.get("type") != "char":
            raise ValueError("unknown tokenizer type %r" % d.get("type"))
        return cls(d["chars"])
