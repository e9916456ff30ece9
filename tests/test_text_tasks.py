"""Text rewards, Chinese numerals, BilingualPairLoader and the arithmetic / zh-en-numbers tasks."""
import json
import math

import numpy as np
import pytest
import torch

from grpo_edge.core.models import build_model
from grpo_edge.core.tokenizer import EOS, PAD, CharTokenizer
from grpo_edge.data.bilingual import BilingualPairLoader, has_cjk, split_pairs
from grpo_edge.data.zh_numbers import int_to_en, int_to_zh, number_pairs, zh_to_int
from grpo_edge.errors import ConfigError, GrpoEdgeError
from grpo_edge.tasks.arithmetic import ArithmeticTask
from grpo_edge.tasks.rewards import (WeightedRewards, chrf, exact_match, format_reward, load_reward,
                                     safe_reward)
from grpo_edge.tasks.zh_en_numbers import ZhEnNumbersTask


# --- rewards ----------------------------------------------------------------------------------
def test_exact_match():
    assert exact_match("19", "19", "12+7=") == 1.0
    assert exact_match(" 19\n", "19", "") == 1.0
    assert exact_match("190", "19", "") == 0.0
    assert exact_match("", "19", "") == 0.0


@pytest.mark.parametrize("text,value", [("19", 1.0), ("-3", 1.0), ("0", 1.0), ("", 0.0), ("-", 0.0),
                                        ("1 9", 0.0), ("--3", 0.0), ("19a", 0.0), ("+3", 0.0), (" 19", 0.0)])
def test_format_reward(text, value):
    assert format_reward(text, "19", "12+7=") == value


def test_chrf_hand_computed():
    # "ab" vs "abc": P = mean(2/2, 1/1) = 1; R = mean(2/3, 1/2, 0/1) = 7/18; F2 = 5PR / (4P + R) = 35/79
    assert chrf("ab", "abc") == pytest.approx(35 / 79)
    # "abcd" vs "abxd": per order 3/4, 1/3, 0, 0 both ways; P = R = 13/48, so F = 13/48
    assert chrf("abcd", "abxd") == pytest.approx(13 / 48)
    # recall weighs more (beta = 2): the reverse pair has P = 7/18, R = 1 -> 5R P / (4P + R) = 35/46
    assert chrf("abc", "ab") == pytest.approx(5 * (7 / 18) / (4 * 7 / 18 + 1))
    assert chrf("three hundred five", "three hundred five") == 1.0
    assert chrf("a b", "ab") == 1.0                      # whitespace is ignored
    assert chrf("abc", "xyz") == 0.0
    assert chrf("", "abc") == 0.0 and chrf("", "") == 1.0
    assert 0.0 < chrf("three hundred four", "three hundred five") < 1.0


def _write_module(tmp_path, monkeypatch, name, body):
    (tmp_path / (name + ".py")).write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))


def test_load_reward(tmp_path, monkeypatch):
    _write_module(tmp_path, monkeypatch, "my_rewards_a",
                  "def short(c, r, p):\n    return 1.0 / (1 + len(c))\nNOT_FN = 3\n")
    fn = load_reward("my_rewards_a:short")
    assert fn("ab", "", "") == pytest.approx(1 / 3)
    for spec, words in [("my_rewards_a", "module.path:function"), ("no_such_mod_xyz:fn", "cannot import"),
                        ("my_rewards_a:missing", "no attribute"), ("my_rewards_a:NOT_FN", "not callable")]:
        with pytest.raises(ConfigError, match=words):
            load_reward(spec)


def test_safe_reward_raises_or_skips():
    def boom(c, r, p):
        raise KeyError("x")
    with pytest.raises(GrpoEdgeError, match=r"'boom' raised KeyError.*completion='12'"):
        safe_reward(boom, "boom", "12", "19", "12+7=")
    for bad in (float("nan"), float("inf")):
        with pytest.raises(GrpoEdgeError, match="'bad' returned"):
            safe_reward(lambda c, r, p: bad, "bad", "12", "19", "12+7=")
    with pytest.warns(RuntimeWarning, match="boom"):
        assert safe_reward(boom, "boom", "12", "19", "12+7=", skip_errors=True) == 0.0
    assert safe_reward(exact_match, "exact_match", "19", "19", "") == 1.0


def test_weighted_rewards(tmp_path, monkeypatch):
    _write_module(tmp_path, monkeypatch, "my_rewards_b", "def half(c, r, p):\n    return 0.5\n")
    w = WeightedRewards({"exact_match": 1.0, "format": 0.1, "my_rewards_b:half": 2.0})
    total, parts = w.score(["19", "x", "-4"], ["19", "19", "4"], ["", "", ""])
    assert torch.allclose(total, torch.tensor([1.0 + 0.1 + 1.0, 1.0, 0.1 + 1.0]))
    assert parts["format"].tolist() == [1.0, 0.0, 1.0]
    with pytest.raises(ConfigError, match="unknown reward 'bleu'"):
        WeightedRewards({"bleu": 1.0})
    with pytest.raises(ConfigError, match="weight"):
        WeightedRewards({"chrf": "high"})


# --- numerals ---------------------------------------------------------------------------------
NUMERALS = [
    (0, "零", "zero"), (7, "七", "seven"), (10, "十", "ten"), (11, "十一", "eleven"), (15, "十五", "fifteen"),
    (19, "十九", "nineteen"), (20, "二十", "twenty"), (21, "二十一", "twenty-one"), (40, "四十", "forty"),
    (99, "九十九", "ninety-nine"), (100, "一百", "one hundred"), (101, "一百零一", "one hundred one"),
    (110, "一百一十", "one hundred ten"), (111, "一百一十一", "one hundred eleven"),
    (120, "一百二十", "one hundred twenty"), (305, "三百零五", "three hundred five"),
    (999, "九百九十九", "nine hundred ninety-nine"), (1000, "一千", "one thousand"),
    (1001, "一千零一", "one thousand one"), (1010, "一千零一十", "one thousand ten"),
    (1100, "一千一百", "one thousand one hundred"), (1105, "一千一百零五", "one thousand one hundred five"),
    (2050, "二千零五十", "two thousand fifty"), (3400, "三千四百", "three thousand four hundred"),
    (9999, "九千九百九十九", "nine thousand nine hundred ninety-nine"), (10000, "一万", "ten thousand"),
    (10001, "一万零一", "ten thousand one"), (10500, "一万零五百", "ten thousand five hundred"),
    (15000, "一万五千", "fifteen thousand"), (20305, "二万零三百零五", "twenty thousand three hundred five"),
    (100001, "十万零一", "one hundred thousand one"), (110000, "十一万", "one hundred ten thousand"),
    (1000000, "一百万", "one million"), (10010000, "一千零一万", "ten million ten thousand"),
]


@pytest.mark.parametrize("n,zh,en", NUMERALS)
def test_numerals(n, zh, en):
    assert int_to_zh(n) == zh
    assert int_to_en(n) == en
    assert zh_to_int(zh) == n


def test_numerals_liang_and_round_trip():
    assert int_to_zh(200, liang=True) == "两百"
    assert int_to_zh(2005, liang=True) == "两千零五"
    assert int_to_zh(22222, liang=True) == "两万两千两百二十二"
    assert int_to_zh(2, liang=True) == "二" and int_to_zh(20, liang=True) == "二十"
    assert zh_to_int("两千零五") == 2005
    zh = [int_to_zh(i) for i in range(20000)]
    assert len(set(zh)) == 20000 and len(set(int_to_en(i) for i in range(20000))) == 20000
    assert all(zh_to_int(z) == i for i, z in enumerate(zh))
    assert all(zh_to_int(int_to_zh(i, liang=True)) == i for i in range(0, 99999999, 9973))
    with pytest.raises(ValueError):
        int_to_zh(-1)


# --- BilingualPairLoader ------------------------------------------------------------------------
def test_loader_builtin_split_and_batches():
    loader = BilingualPairLoader(src_lang="zh", tgt_lang="en", max_length=64, batch_size=16)
    train, test = set(loader.train_pairs), set(loader.test_pairs)
    assert not train & test and len(train | test) == 10000 and len(test) == 1000
    assert ("三百零五", "three hundred five") in train | test
    again = BilingualPairLoader(batch_size=16)
    assert again.test_pairs == loader.test_pairs                          # deterministic from the seed
    assert BilingualPairLoader(seed=1).test_pairs != loader.test_pairs
    batch = next(iter(loader))
    assert batch["src"].shape == (16, loader.src_len) and batch["src"].dtype == torch.long
    tgt, mask = batch["tgt"], batch["tgt_mask"]
    lengths = mask.sum(1).long()
    assert (tgt.gather(1, (lengths - 1).unsqueeze(1)) == EOS).all()      # EOS closes each target
    assert (tgt[mask == 0] == PAD).all()
    assert len(loader) == math.ceil(9000 / 16)
    reverse = BilingualPairLoader(src_lang="en", tgt_lang="zh")
    assert ("three hundred five", "三百零五") in set(reverse.train_pairs) | set(reverse.test_pairs)


def test_loader_reads_tsv_jsonl_and_folder(tmp_path):
    rows = [("一", "one"), ("二", "two"), ("三", "three"), ("四", "four"), ("五", "five")]
    tsv = tmp_path / "p.tsv"
    tsv.write_text("\n".join("%s\t%s" % r for r in rows) + "\n\n", encoding="utf-8")
    jl = tmp_path / "p.jsonl"
    jl.write_text("\n".join(json.dumps({"src": a, "tgt": b}, ensure_ascii=False) for a, b in rows), encoding="utf-8")
    jl2 = tmp_path / "q.jsonl"
    jl2.write_text("\n".join(json.dumps({"en": b, "zh": a}, ensure_ascii=False) for a, b in rows), encoding="utf-8")
    for path in (tsv, jl, jl2):
        loader = BilingualPairLoader(data_path=str(path), test_fraction=0.2)
        assert sorted(loader.train_pairs + loader.test_pairs) == sorted(rows)
        assert len(loader.test_pairs) == 1
        assert set(loader.tokenizer.chars) == set("".join(a + b for a, b in rows))
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "train.tsv").write_text("\n".join("%s\t%s" % r for r in rows[:4]), encoding="utf-8")
    (folder / "test.jsonl").write_text(json.dumps({"zh": "五", "en": "five"}, ensure_ascii=False), encoding="utf-8")
    loader = BilingualPairLoader(data_path=str(folder))
    assert loader.train_pairs == rows[:4] and loader.test_pairs == [("五", "five")]


def test_loader_truncates(tmp_path):
    path = tmp_path / "long.tsv"
    path.write_text("一二三四五六\tabcdefgh\n七\tsix\n", encoding="utf-8")
    loader = BilingualPairLoader(data_path=str(path), max_length=4, test_fraction=0.0)
    assert ("一二三四", "abc") in loader.train_pairs and loader.num_truncated == 1
    assert loader.src_len == 4 and loader.tgt_len == 4


@pytest.mark.parametrize("content,words", [
    ("一\tone\n二 two\n", r"bad.tsv:2: expected 'source<TAB>target'"),
    ("一\tone\n \tone\n", r"bad.tsv:2: empty source"),
    ("one\t一\n", r"bad.tsv:1: src side 'one' has no Chinese.*look reversed"),
    ("一\t二\n", r"bad.tsv:1: tgt side '二' holds Chinese"),
])
def test_loader_bad_lines(tmp_path, content, words):
    path = tmp_path / "bad.tsv"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(GrpoEdgeError, match=words):
        BilingualPairLoader(data_path=str(path))


def test_loader_bad_files(tmp_path):
    with pytest.raises(GrpoEdgeError, match="does not exist"):
        BilingualPairLoader(data_path=str(tmp_path / "nope.tsv"))
    (tmp_path / "empty.tsv").write_text("")
    with pytest.raises(GrpoEdgeError, match="is empty"):
        BilingualPairLoader(data_path=str(tmp_path / "empty.tsv"))
    (tmp_path / "blank.tsv").write_text("\n\n")
    with pytest.raises(GrpoEdgeError, match="holds no pairs"):
        BilingualPairLoader(data_path=str(tmp_path / "blank.tsv"))
    # GBK 一 (d2 bb) happens to be valid UTF-8, so the first bad byte is on line 2
    (tmp_path / "gbk.tsv").write_bytes("一\tone\n三百\tthree hundred\n".encode("gbk"))
    with pytest.raises(GrpoEdgeError, match=r"gbk.tsv:2: not UTF-8"):
        BilingualPairLoader(data_path=str(tmp_path / "gbk.tsv"))
    (tmp_path / "bad.jsonl").write_text('{"src": "一", "tgt": "one"}\n{"src": "二"\n', encoding="utf-8")
    with pytest.raises(GrpoEdgeError, match=r"bad.jsonl:2: not valid JSON"):
        BilingualPairLoader(data_path=str(tmp_path / "bad.jsonl"))
    (tmp_path / "keys.jsonl").write_text('{"a": "一", "b": "one"}\n', encoding="utf-8")
    with pytest.raises(GrpoEdgeError, match=r"keys.jsonl:1: expected keys"):
        BilingualPairLoader(data_path=str(tmp_path / "keys.jsonl"))
    with pytest.raises(GrpoEdgeError, match="mono_path is only used"):
        BilingualPairLoader(mono_path=str(tmp_path / "mono.txt"))
    with pytest.raises(GrpoEdgeError, match="built-in pairs are zh<->en"):
        BilingualPairLoader(src_lang="fr", tgt_lang="en")


def test_split_pairs_disjoint_with_duplicates():
    pairs = [("一", "one")] * 5 + [("二", "two"), ("三", "three")]
    train, test = split_pairs(pairs, 0.5, seed=3)
    assert not set(train) & set(test) and len(train) + len(test) == 3


# --- tasks --------------------------------------------------------------------------------------
def test_arithmetic_split_and_prompts():
    task = ArithmeticTask({}, seed=0)
    train, test = set(task.train_problems), set(task.test_problems)
    assert not train & test and len(train) + len(test) == 100 * 100 and len(test) == 1000
    assert ("12+7=", "19") in train | test
    assert ArithmeticTask({}, seed=5).test_problems == task.test_problems     # split does not follow the run seed
    assert ArithmeticTask({"split_seed": 1}).test_problems != task.test_problems
    x = task.encode_inputs(["1+2=", "99+99="])
    assert x.shape == (2, 6) and x[0, :2].tolist() == [PAD, PAD]
    assert task.tokenizer.decode(x[0].tolist()) == "1+2=" and x[0, -1] == task.tokenizer.stoi["="]
    sub = ArithmeticTask({"ops": ["+", "-"], "max_operand": 9})
    assert ("3-8=", "-5") in set(sub.train_problems) | set(sub.test_problems)
    assert sub.max_new_tokens == 3 and len(sub.train_problems) + len(sub.test_problems) == 200
    meta = task.checkpoint_meta()
    assert CharTokenizer.from_dict(meta["tokenizer"]).vocab_size == task.model_kwargs()["vocab_size"] == 16
    assert meta["prompt_len"] == 6 and meta["max_new_tokens"] == 4
    calib = task.calibration_inputs(5)
    assert calib.shape == (5, 6) and calib.dtype == np.int64


def test_arithmetic_config_errors():
    for cfg, words in [({"max_new_tokens": 2}, "max_new_tokens=2"), ({"ops": ["*"]}, "task.ops"),
                       ({"prompt_len": 3}, "prompt_len=3"), ({"max_operand": "9"}, "max_operand must be int"),
                       ({"rewards": {"bleu": 1}}, "unknown reward"), ({"reward_errors": "ignore"}, "reward_errors")]:
        with pytest.raises(ConfigError, match=words):
            ArithmeticTask(cfg)


def test_zh_en_task_split():
    task = ZhEnNumbersTask({"max_number": 999}, seed=0)
    assert not set(task.train_problems) & set(task.test_problems)
    assert len(task.train_problems) + len(task.test_problems) == 1000
    assert ZhEnNumbersTask({"max_number": 999}, seed=3).test_problems == task.test_problems
    assert task.max_new_tokens == max(len(en) for _, en in number_pairs(999)) + 1
    x = task.encode_inputs(["三百零五", "七"])
    assert x.shape == (2, task.src_len) and x[1, 1:].eq(PAD).all()
    assert task.checkpoint_meta()["src_len"] == task.src_len


def _micro_gpt(task):
    torch.manual_seed(0)
    return build_model("micro-gpt", d_model=32, n_layer=2, n_head=2, max_len=16, **task.model_kwargs())


def _tiny_transformer(task):
    torch.manual_seed(0)
    return build_model("tiny-transformer", d_model=32, nhead=2, num_layers=1, dim_feedforward=64, max_len=64,
                       **task.model_kwargs())


def _check_rollout(task, policy, groups, g_size, key):
    r = task.rollout(policy, groups, g_size, torch.Generator().manual_seed(0))
    n = groups * g_size
    t = r.actions.shape[1]
    assert len(r) == n and r.num_groups == groups and t <= task.max_new_tokens
    assert r.mask.shape == r.old_logp.shape == (n, t) and r.rewards.shape == r.truncated.shape == (n,)
    assert ((r.mask[:, 1:] - r.mask[:, :-1]) <= 0).all()                 # 1s then 0s
    assert (r.actions[r.mask == 0] == PAD).all()
    has_eos = ((r.actions == EOS) & (r.mask > 0)).any(1)
    assert torch.equal(r.truncated, ~has_eos)
    x = r.inputs[key].view(groups, g_size, -1)
    assert (x == x[:, :1]).all()                                          # one prompt per group
    hi = sum(w for _, _, w in task.rewards.items)
    assert (r.rewards >= 0).all() and (r.rewards <= hi + 1e-6).all()
    logp, entropy = task.logprobs(policy, r)
    assert torch.allclose(logp * r.mask, r.old_logp * r.mask, atol=1e-4) and entropy.shape == (n, t)
    return r


def test_arithmetic_rollout_warm_start_and_evaluate():
    task = ArithmeticTask({"max_operand": 20}, seed=0)
    policy = _micro_gpt(task)
    _check_rollout(task, policy, groups=4, g_size=3, key="prompt")
    gen = torch.Generator().manual_seed(0)
    fixed = next(task.warm_start_batches(64, gen))
    assert fixed["target"][fixed["target_mask"] == 0].eq(PAD).all()
    opt = torch.optim.Adam(policy.parameters(), lr=1e-2)
    with torch.no_grad():
        before = task.supervised_loss(policy, fixed).item()
    for i, batch in enumerate(task.warm_start_batches(32, gen)):
        loss = task.supervised_loss(policy, batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if i == 25:
            break
    with torch.no_grad():
        after = task.supervised_loss(policy, fixed).item()
    assert after < 0.8 * before
    result = task.evaluate(policy, n=40)
    assert result["n"] == 40 and 0.0 <= result["exact_match"] <= 1.0 and 0.0 <= result["format"] <= 1.0


def test_zh_en_rollout_and_evaluate():
    task = ZhEnNumbersTask({"max_number": 999, "max_new_tokens": 12}, seed=0)
    policy = _tiny_transformer(task)
    _check_rollout(task, policy, groups=3, g_size=4, key="src")
    result = task.evaluate(policy, n=16)
    assert result["n"] == 16 and set(result) >= {"exact_match", "chrf", "reward"}


def test_user_reward_that_raises_fails_the_rollout(tmp_path, monkeypatch):
    _write_module(tmp_path, monkeypatch, "my_rewards_c", "def crash(c, r, p):\n    return 1 / 0\n")
    with pytest.raises(GrpoEdgeError, match=r"checking rewards on 4 samples of task arithmetic's train data, called "
                                            r"as fn\(completion, reference, prompt\): reward 'my_rewards_c:crash' "
                                            r"raised ZeroDivisionError"):
        ArithmeticTask({"max_operand": 9, "reward": "my_rewards_c:crash"})      # checked before any training
    with pytest.warns(RuntimeWarning):
        task = ArithmeticTask({"max_operand": 9, "reward": "my_rewards_c:crash", "reward_errors": "skip"})
    policy = _micro_gpt(task)
    with pytest.warns(RuntimeWarning):
        r = task.rollout(policy, 2, 2, torch.Generator().manual_seed(0))
    assert r.reward_parts["my_rewards_c:crash"].eq(0).all()


def test_registry_defaults_cover_every_key():
    from grpo_edge.tasks import get_task, task_defaults
    for name, cls in [("arithmetic", ArithmeticTask), ("zh-en-numbers", ZhEnNumbersTask)]:
        task = get_task(name, {"name": name, "eval_size": 10}, seed=0)
        assert isinstance(task, cls) and task.eval_size == 10
        assert set(task_defaults(name)) >= {"rewards", "reward", "reward_errors", "temperature", "eval_size",
                                            "max_new_tokens", "split_seed", "test_fraction"}


# --- back-translation ---------------------------------------------------------------------------
TINY_REVERSE = {"d_model": 32, "nhead": 2, "num_layers": 1, "dim_feedforward": 64}


def test_back_translation_adds_pairs_in_the_right_direction(tmp_path, capfd):
    """Synthetic pairs: generated Chinese source, real English target from mono.txt, never a held-out one; a
    line that does not translate back (issue 31: 'hello world' became a pair with '四百四十四') is dropped;
    progress lines go to stderr."""
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("\n".join("%s\t%s" % (int_to_zh(i), int_to_en(i)) for i in range(90) if i % 3), encoding="utf-8")
    mono = tmp_path / "mono.txt"
    mono_lines = [int_to_en(i) for i in range(0, 90, 3)] + [int_to_en(1), "hello world"]   # a real target, junk
    mono.write_text("\n".join(mono_lines) + "\n", encoding="utf-8")
    loader = BilingualPairLoader(data_path=str(pairs), augment=True, mono_path=str(mono), bt_steps=300,
                                 bt_model=TINY_REVERSE, test_fraction=0.1)
    stats = loader.augment_stats
    assert stats["mono"] == len(mono_lines) and stats["known"] + stats["held_out"] >= 1
    assert stats["kept"] == len(loader.synthetic_pairs) > 10
    assert stats["rejected"] + stats["not_round_trip"] >= 1
    real_src_chars = set("".join(int_to_zh(i) for i in range(90)))
    held = set(t for _, t in loader.test_pairs)
    en2zh = dict((int_to_en(i), int_to_zh(i)) for i in range(90))
    for src, tgt in loader.synthetic_pairs:                   # source: generated Chinese; target: real English
        assert has_cjk(src) and set(src) <= real_src_chars
        assert tgt in mono_lines and tgt not in held and tgt != "hello world"
    right = sum(en2zh[t] == s for s, t in loader.synthetic_pairs)
    assert right >= 0.9 * len(loader.synthetic_pairs), loader.synthetic_pairs
    assert set(loader.synthetic_pairs) <= set(loader.train_pairs)
    err = capfd.readouterr().err
    assert "back-translation: reverse model (target -> source) step 300/300" in err
    assert "back-translation: forward model (source -> target) step 300/300" in err
    assert "synthetic pairs kept of %d lines" % len(mono_lines) in err


def test_back_translation_bad_mono(tmp_path):
    mono = tmp_path / "mono.txt"
    mono.write_text("one\n三\n", encoding="utf-8")
    with pytest.raises(GrpoEdgeError, match=r"mono.txt:2: monolingual text '三' holds Chinese"):
        BilingualPairLoader(max_number=20, augment=True, mono_path=str(mono))
    mono.write_bytes(b"one\n\xff\xfe\n")
    with pytest.raises(GrpoEdgeError, match=r"mono.txt:2: not UTF-8"):
        BilingualPairLoader(max_number=20, augment=True, mono_path=str(mono))
    with pytest.raises(GrpoEdgeError, match="does not exist"):
        BilingualPairLoader(max_number=20, augment=True, mono_path=str(tmp_path / "none.txt"))
    with pytest.raises(ConfigError, match="needs mono_path"):
        BilingualPairLoader(augment=True)
