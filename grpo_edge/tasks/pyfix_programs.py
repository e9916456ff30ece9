"""The pyfix task's data: small Python functions, each with a few asserts and a bug a student makes.

    from grpo_edge.tasks.pyfix_programs import make_split
    train, test = make_split(n_train=2000, n_test=300, test_fraction=0.2, split_seed=0)
    train[0].broken, train[0].fixed, train[0].tests, train[0].bug     # str, str, str, one of BUG_KINDS

Every function comes from a template (TEMPLATES: arithmetic, conditionals, loops, string and list work)
filled with one choice of names and constants, so a template gives many functions that differ in their
text. Functions are split into train and test per template (`test_fraction` of each template's functions,
shuffled with `split_seed`): the held-out programs are other functions of the same kinds, never a train
function with another bug. A bug (BUG_KINDS) is applied at one place chosen at random; it is kept only when
the broken program really fails: it does not parse, or one of its asserts fails or raises. The asserts'
expected values are computed from the reference function, which is checked to pass them.

Everything is a pure function of its arguments: the same split for every training seed. Building the
default split runs about 5,000 tiny generated programs in this process (our own templates, bounded loops,
no input or output) and takes about a second.
"""
import builtins
import keyword
import random
import re
from collections import namedtuple

Pair = namedtuple("Pair", "broken fixed tests bug template")

BUG_KINDS = ("missing_colon", "indentation", "bracket", "misspelling", "operator", "off_by_one", "wrong_return")

# A template: (name, function names, source with {f} and the names of NAMES / CONSTS, argument tuples to test).
# Argument tuples are Python literals; expected values come from running the reference.
NAMES = {      # many names a role may take, so that the model learns to copy names rather than to recall them
    "a": ("a", "x", "m", "first", "left", "p", "u", "lhs", "one", "base", "x1", "val_a", "top", "big", "w", "h"),
    "b": ("b", "y", "n", "second", "right", "q", "v", "rhs", "two", "other", "x2", "val_b", "bottom", "small", "z",
          "r"),
    "n": ("n", "k", "num", "value", "count", "limit", "size", "amount", "number", "stop", "upto", "level", "depth",
          "times", "big_n", "top_n"),
    "xs": ("xs", "items", "nums", "values", "data", "lst", "arr", "seq", "elements", "numbers", "things", "vals",
           "collection", "row", "pool", "bag"),
    "x": ("x", "item", "v", "num", "element", "e", "val", "entry", "thing", "obj", "piece", "cur", "el", "current",
          "member", "unit"),
    "s": ("s", "text", "word", "line", "name", "msg", "string", "phrase", "label", "title", "sentence", "chars",
          "src", "token", "who", "person"),
    "acc": ("total", "result", "acc", "out", "answer", "res", "running", "tally", "score", "sofar", "agg", "found",
            "best", "keep", "ret", "r_val"),
    "i": ("i", "j", "idx", "pos", "t", "step", "index", "ii", "cnt", "pointer", "loc", "at", "place", "spot", "slot",
          "jj"),
    "ch": ("ch", "c", "letter", "char", "symbol", "ltr", "glyph", "mark", "sym", "l", "cc", "one_char", "chr_", "bit",
           "key", "target"),
}
CONSTS = {"k": (2, 3, 4, 5, 7, 10)}
# A name is a role's word as it is (a third of the time), or with one of these before or after it: about 300
# names a role, so that no train name comes often enough to be recalled (a model that recalls names instead of
# copying them fails on held-out functions: 0.24 of them fixed, 1.00 of train ones, with 16 plain names a role).
PREFIXES = ("my_", "the_", "cur_", "new_", "old_", "tmp_", "a_")
SUFFIXES = ("1", "2", "3", "0", "_a", "_b", "_x", "_val", "_n", "s", "_in", "_v")
FUNCTION_SUFFIXES = ("_fn", "_it", "2", "_v2", "_now", "_calc")

TEMPLATES = (
    ("add", ("add", "plus", "add_two", "sum_two"), "def {f}({a}, {b}):\n    return {a} + {b}",
     ["(2, 3)", "(10, -4)", "(0, 7)"]),
    ("subtract", ("subtract", "minus", "difference", "sub"), "def {f}({a}, {b}):\n    return {a} - {b}",
     ["(9, 4)", "(3, 8)", "(0, 5)"]),
    ("multiply", ("multiply", "times", "product", "mul"), "def {f}({a}, {b}):\n    return {a} * {b}",
     ["(3, 4)", "(5, 0)", "(-2, 6)"]),
    ("add_k", ("add_{k}", "plus_{k}", "inc_by_{k}"), "def {f}({x}):\n    return {x} + {k}",
     ["(1,)", "(10,)", "(-3,)"]),
    ("times_k", ("times_{k}", "scale_{k}", "mul_by_{k}"), "def {f}({x}):\n    return {x} * {k}",
     ["(2,)", "(7,)", "(-1,)"]),
    ("square", ("square", "sq", "squared"), "def {f}({x}):\n    return {x} * {x}", ["(3,)", "(-4,)", "(10,)"]),
    ("is_even", ("is_even", "even", "check_even"), "def {f}({n}):\n    return {n} % 2 == 0",
     ["(4,)", "(7,)", "(0,)", "(-3,)"]),
    ("is_multiple", ("is_multiple_of_{k}", "divisible_by_{k}"), "def {f}({n}):\n    return {n} % {k} == 0",
     ["({k},)", "({k} * 3,)", "({k} + 1,)", "(1,)"]),
    ("is_positive", ("is_positive", "positive", "above_zero"), "def {f}({n}):\n    return {n} > 0",
     ["(5,)", "(-2,)", "(0,)"]),
    ("maximum", ("maximum", "max_of", "bigger", "larger"),
     "def {f}({a}, {b}):\n    if {a} > {b}:\n        return {a}\n    return {b}", ["(3, 9)", "(8, 2)", "(-1, -5)"]),
    ("minimum", ("minimum", "min_of", "smaller", "lesser"),
     "def {f}({a}, {b}):\n    if {a} < {b}:\n        return {a}\n    return {b}", ["(3, 9)", "(8, 2)", "(-1, -5)"]),
    ("absolute", ("absolute", "abs_value", "magnitude"),
     "def {f}({n}):\n    if {n} < 0:\n        return -{n}\n    return {n}", ["(-4,)", "(6,)", "(0,)"]),
    ("sign", ("sign", "sign_of"),
     "def {f}({n}):\n    if {n} > 0:\n        return 1\n    if {n} < 0:\n        return -1\n    return 0",
     ["(7,)", "(-3,)", "(0,)"]),
    ("clamp", ("clamp", "limit_to", "bound"),
     "def {f}({x}, {a}, {b}):\n    if {x} < {a}:\n        return {a}\n    if {x} > {b}:\n        return {b}\n"
     "    return {x}", ["(5, 0, 10)", "(-2, 0, 10)", "(12, 0, 10)"]),
    ("sum_list", ("sum_list", "total_of", "add_all"),
     "def {f}({xs}):\n    {acc} = 0\n    for {x} in {xs}:\n        {acc} += {x}\n    return {acc}",
     ["([1, 2, 3],)", "([],)", "([5, -2],)"]),
    ("product_list", ("product_list", "multiply_all", "prod"),
     "def {f}({xs}):\n    {acc} = 1\n    for {x} in {xs}:\n        {acc} *= {x}\n    return {acc}",
     ["([2, 3, 4],)", "([],)", "([5, -1],)"]),
    ("count_positive", ("count_positive", "num_positive", "positives"),
     "def {f}({xs}):\n    {acc} = 0\n    for {x} in {xs}:\n        if {x} > 0:\n            {acc} += 1\n"
     "    return {acc}", ["([1, -2, 3],)", "([],)", "([-1, 0],)"]),
    ("sum_to", ("sum_to", "sum_up_to", "triangle"),
     "def {f}({n}):\n    {acc} = 0\n    for {i} in range(1, {n} + 1):\n        {acc} += {i}\n    return {acc}",
     ["(4,)", "(1,)", "(0,)"]),
    ("factorial", ("factorial", "fact"),
     "def {f}({n}):\n    {acc} = 1\n    for {i} in range(2, {n} + 1):\n        {acc} *= {i}\n    return {acc}",
     ["(5,)", "(1,)", "(3,)"]),
    ("power", ("power", "pow_of", "raise_to"),
     "def {f}({a}, {n}):\n    {acc} = 1\n    for {i} in range({n}):\n        {acc} *= {a}\n    return {acc}",
     ["(2, 3)", "(5, 0)", "(3, 2)"]),
    ("count_char", ("count_char", "occurrences", "count_of"),
     "def {f}({s}, {ch}):\n    {acc} = 0\n    for {x} in {s}:\n        if {x} == {ch}:\n            {acc} += 1\n"
     "    return {acc}", ["('banana', 'a')", "('', 'x')", "('hello', 'l')"]),
    ("count_vowels", ("count_vowels", "vowels"),
     "def {f}({s}):\n    {acc} = 0\n    for {ch} in {s}:\n        if {ch} in 'aeiou':\n            {acc} += 1\n"
     "    return {acc}", ["('banana',)", "('sky',)", "('idea',)"]),
    ("largest", ("largest", "max_item", "biggest"),
     "def {f}({xs}):\n    {acc} = {xs}[0]\n    for {x} in {xs}:\n        if {x} > {acc}:\n            {acc} = {x}\n"
     "    return {acc}", ["([3, 9, 2],)", "([-5, -1],)", "([4],)", "([7, 1, 5],)"]),
    ("smallest", ("smallest", "min_item", "tiniest"),
     "def {f}({xs}):\n    {acc} = {xs}[0]\n    for {x} in {xs}:\n        if {x} < {acc}:\n            {acc} = {x}\n"
     "    return {acc}", ["([3, 9, 2],)", "([-5, -1],)", "([4],)", "([1, 7, 5],)"]),
    ("contains", ("contains", "has_item", "includes"),
     "def {f}({xs}, {x}):\n    for {i} in {xs}:\n        if {i} == {x}:\n            return True\n    return False",
     ["([1, 2, 3], 2)", "([], 1)", "([4, 5], 6)"]),
    ("index_of", ("index_of", "find_pos", "position"),
     "def {f}({xs}, {x}):\n    for {i} in range(len({xs})):\n        if {xs}[{i}] == {x}:\n            return {i}\n"
     "    return -1", ["([4, 5, 6], 6)", "([1], 1)", "([2, 3], 9)"]),
    ("first", ("first", "head", "first_item"), "def {f}({xs}):\n    return {xs}[0]",
     ["([3, 4, 5],)", "([9],)", "([0, 1],)"]),
    ("last", ("last", "tail_item", "last_item"), "def {f}({xs}):\n    return {xs}[-1]",
     ["([3, 4, 5],)", "([9],)", "([0, 1],)"]),
    ("reverse", ("reverse", "backwards", "flip"), "def {f}({s}):\n    return {s}[::-1]",
     ["('abc',)", "('',)", "('ab',)"]),
    ("double_all", ("double_all", "doubled", "twice_each"), "def {f}({xs}):\n    return [{x} * 2 for {x} in {xs}]",
     ["([1, 2],)", "([],)", "([-3],)"]),
    ("evens", ("evens", "only_even", "keep_even"),
     "def {f}({xs}):\n    return [{x} for {x} in {xs} if {x} % 2 == 0]", ["([1, 2, 3, 4],)", "([],)", "([5, 6],)"]),
    ("mean", ("mean", "average", "avg"), "def {f}({xs}):\n    return sum({xs}) / len({xs})",
     ["([1, 2, 3],)", "([4],)", "([2, 4],)"]),
    ("shout", ("shout", "yell", "loud"), "def {f}({s}):\n    return {s}.upper() + '!'",
     ["('hi',)", "('ok',)", "('',)"]),
    ("greet", ("greet", "hello", "welcome"), "def {f}({s}):\n    return 'Hello, ' + {s}",
     ["('Ann',)", "('Bo',)", "('',)"]),
    ("join_words", ("join_words", "sentence", "glue"), "def {f}({xs}):\n    return ' '.join({xs})",
     ["(['a', 'b'],)", "([],)", "(['hi'],)"]),
    ("fizz", ("fizz", "fizz_or_num"),
     "def {f}({n}):\n    if {n} % 3 == 0:\n        return 'Fizz'\n    return str({n})", ["(9,)", "(4,)", "(3,)"]),
)

KEYWORD_TYPOS = {"return": ("retrun", "reutrn", "retun"), "for": ("fro", "foor"), "if": ("fi", "iff"),
                 "def": ("dfe", "def_"), "in": ("inn",), "True": ("true",), "False": ("false",)}
OPERATOR_SWAPS = {"+": ("-", "*"), "-": ("+",), "*": ("+", "-"), "/": ("*", "//"), "%": ("//",),
                  "<": (">", "<="), ">": ("<", ">="), "==": ("!=",), "+=": ("-=",), "*=": ("+=",)}
_OPERATOR_RE = re.compile(r"==|\+=|\*=|(?<![=!<>])[<>](?!=)|(?<![*/+-])[+*/%-](?![=*/])")
_INT_RE = re.compile(r"(?<![\w.])\d+(?![\w.])")
_NAME_RE = re.compile(r"\b[A-Za-z_][A-Za-z_0-9]*\b")
_KEYWORDS = set(KEYWORD_TYPOS) | {"not", "and", "or", "None", "len", "sum", "range", "str"}


def name_like(word, rng, suffixes=SUFFIXES, prefixes=PREFIXES):
    """`word` as it is, or with a prefix or a suffix (a third of the time each; half and half without
    prefixes): never a keyword or a builtin's name."""
    for _ in range(8):
        how = rng.randrange(3) if prefixes else rng.choice((0, 2))
        name = word if how == 0 else (rng.choice(prefixes) + word if how == 1 else word + rng.choice(suffixes))
        if not keyword.iskeyword(name) and not hasattr(builtins, name):
            return name
    return word


def random_name(word, rng):
    """A made-up name for any role (`word` unused): 1 to 7 random lowercase letters, now and then two such
    parts joined by '_' or a digit after them; never a keyword or a builtin's name. A model cannot recall
    these, only copy them (the train-time augmentation, fresh_pair)."""
    for _ in range(8):
        name = "".join(rng.choice(LETTERS) for _ in range(rng.randint(1, 7)))
        if rng.random() < 0.25:
            name += "_" + "".join(rng.choice(LETTERS) for _ in range(rng.randint(1, 4)))
        if rng.random() < 0.2:
            name += rng.choice("0123456789")
        if not keyword.iskeyword(name) and not hasattr(builtins, name):
            return name
    return word


LETTERS = "abcdefghijklmnopqrstuvwxyz"


def fill(template, rng, namer=name_like):
    """One function of `template` (a TEMPLATES row): (source, the argument tuples with constants filled).
    namer(word, rng) names each role (name_like: the role's word, maybe with a prefix or suffix)."""
    _, fnames, source, args = template
    choice = {"k": rng.choice(CONSTS["k"])}
    choice["f"] = name_like(rng.choice(fnames).format(k=choice["k"]), rng, FUNCTION_SUFFIXES, ())
    taken = {choice["f"]}
    for key in sorted(NAMES):                       # distinct roles get distinct names, none the function's
        for _ in range(16):
            choice[key] = namer(rng.choice(NAMES[key]), rng)
            if choice[key] not in taken:
                break
        else:                                       # (never seen) a plain name no other role has
            choice[key] = rng.choice([v for v in NAMES[key] if v not in taken])
        taken.add(choice[key])
    return source.format(**choice), [a.format(k=choice["k"]) for a in args]


def tests_for(source, args):
    """The asserts of a reference function, expected values from running it: 'assert f(2, 3) == 5' lines."""
    fname = source.split("(", 1)[0][len("def "):]
    scope = {}
    exec(compile(source, "<pyfix>", "exec"), scope)                      # our own template: trusted
    lines = []
    for a in args:
        value = scope[fname](*eval(a, {}))                           # our own literals
        lines.append("assert %s%s == %r" % (fname, a if not a.endswith(",)") else a[:-2] + ")", value))
    return "\n".join(lines)


def fails(broken, tests):
    """True when `broken` does not parse, or running it with its asserts raises (an assert or any error)."""
    try:
        code = compile(broken + "\n" + tests, "<pyfix>", "exec")
    except SyntaxError:                                  # IndentationError included
        return True
    try:
        exec(code, {})                                   # bounded: the templates have no while loops
    except Exception:
        return True
    return False


# --------------------------------------------------------------------------------------------- bugs
def _lines(source):
    return source.split("\n")


def bug_missing_colon(source, rng):
    lines = _lines(source)
    spots = [i for i, line in enumerate(lines) if line.endswith(":")]
    i = rng.choice(spots)
    lines[i] = lines[i][:-1]
    return "\n".join(lines)


def bug_indentation(source, rng):
    """A block's first line dedented to its header, or a line indented one level too deep."""
    lines = _lines(source)
    spots = [i for i in range(1, len(lines)) if lines[i - 1].endswith(":")]
    i = rng.choice(spots)
    header = lines[i - 1]
    if rng.random() < 0.5:
        lines[i] = header[:len(header) - len(header.lstrip())] + lines[i].lstrip()
    else:
        lines[i] = "    " + lines[i]
    return "\n".join(lines)


def bug_bracket(source, rng):
    spots = [m.start() for m in re.finditer(r"[()\[\]]", source)]
    i = rng.choice(spots)
    return source[:i] + source[i + 1:]


def bug_misspelling(source, rng):
    """A keyword misspelt, or one use of a name with a letter dropped or doubled."""
    names = [m for m in _NAME_RE.finditer(source)]
    keywords = [m for m in names if m.group() in KEYWORD_TYPOS]
    others = [m for m in names if m.group() not in _KEYWORDS and len(m.group()) > 2 and m.start() > 4]
    if keywords and (not others or rng.random() < 0.5):
        m = rng.choice(keywords)
        wrong = rng.choice(KEYWORD_TYPOS[m.group()])
    else:
        m = rng.choice(others)
        word, j = m.group(), rng.randrange(1, len(m.group()))
        wrong = word[:j] + word[j + 1:] if rng.random() < 0.5 else word[:j] + word[j] + word[j:]
    return source[:m.start()] + wrong + source[m.end():]


def bug_operator(source, rng):
    spots = [m for m in _OPERATOR_RE.finditer(source.split("\n", 1)[1]) if m.group() in OPERATOR_SWAPS]
    offset = source.index("\n") + 1
    m = rng.choice(spots)
    wrong = rng.choice(OPERATOR_SWAPS[m.group()])
    return source[:offset + m.start()] + wrong + source[offset + m.end():]


def bug_off_by_one(source, rng):
    """An integer constant one more or one less (a range's bound, an index, a start value)."""
    body_at = source.index("\n") + 1
    spots = [m for m in _INT_RE.finditer(source) if m.start() >= body_at]
    m = rng.choice(spots)
    value = int(m.group()) + rng.choice((-1, 1))
    if value < 0:
        value = int(m.group()) + 1
    return source[:m.start()] + str(value) + source[m.end():]


def bug_wrong_return(source, rng):
    """A return of another name of the function (a parameter, the loop variable, the accumulator)."""
    lines = _lines(source)
    spots = [i for i, line in enumerate(lines) if line.lstrip().startswith("return ")]
    i = rng.choice(spots)
    indent, expr = lines[i].split("return ", 1)
    names = sorted(set(m.group() for m in _NAME_RE.finditer(source[source.index("("):]))
                   - _KEYWORDS - set(_NAME_RE.findall(expr)) - {"upper", "join"})
    if not names:
        raise IndexError("no other name to return")
    lines[i] = indent + "return " + rng.choice(names)
    return "\n".join(lines)


BUGS = {"missing_colon": bug_missing_colon, "indentation": bug_indentation, "bracket": bug_bracket,
        "misspelling": bug_misspelling, "operator": bug_operator, "off_by_one": bug_off_by_one,
        "wrong_return": bug_wrong_return}


def break_program(source, tests, bug, rng, tries=8):
    """`source` with one bug of kind `bug` that makes it fail, or None when this function cannot have it."""
    for _ in range(tries):
        try:
            broken = BUGS[bug](source, rng)
        except (IndexError, ValueError):                 # no place for this bug in this function
            return None
        if broken != source and fails(broken, tests):
            return broken
    return None


# --------------------------------------------------------------------------------------------- the split
def functions(template, rng, n):
    """Up to n distinct functions (source, tests) of one template."""
    out, seen = [], set()
    for _ in range(n * 4):
        source, args = fill(template, rng)
        if source not in seen:
            seen.add(source)
            out.append((source, tests_for(source, args)))
        if len(out) == n:
            break
    return out


def _pairs(funcs, n, rng):
    """n (function, bug) pairs drawn from funcs = [(template name, source, tests)], bug kinds in turn."""
    out, k = [], 0
    while len(out) < n and k < n * 20:
        name, source, tests = funcs[rng.randrange(len(funcs))]
        bug = BUG_KINDS[k % len(BUG_KINDS)]
        k += 1
        broken = break_program(source, tests, bug, rng)
        if broken is not None:
            out.append(Pair(broken, source, tests, bug, name))
    return out


TEMPLATE_BY_NAME = dict((t[0], t) for t in TEMPLATES)


def fresh_pair(template_name, bug, rng, avoid=(), tries=20, made_up=0.0):
    """A new pair of a template and bug kind: the train-time augmentation (task.augment). Each role's name is
    made up (random_name) with probability `made_up`, else drawn as the split's names are (name_like); the
    function's name still says what it does. Never a function in `avoid` (the held-out ones); None when no
    such pair came in `tries`."""
    template = TEMPLATE_BY_NAME[template_name]

    def namer(word, rng):
        return random_name(word, rng) if rng.random() < made_up else name_like(word, rng)
    for _ in range(tries):
        source, args = fill(template, rng, namer=namer)
        if source in avoid:
            continue
        tests = tests_for(source, args)
        broken = break_program(source, tests, bug, rng)
        if broken is not None:
            return Pair(broken, source, tests, bug, template_name)
    return None


def make_split(n_train=2000, n_test=300, test_fraction=0.2, split_seed=0, per_template=60):
    """(train pairs, test pairs): the test pairs' functions appear in no train pair."""
    rng = random.Random(split_seed)
    train_funcs, test_funcs = [], []
    for template in TEMPLATES:
        funcs = functions(template, rng, per_template)
        rng.shuffle(funcs)
        n_held = max(1, int(round(test_fraction * len(funcs))))
        test_funcs += [(template[0],) + f for f in funcs[:n_held]]
        train_funcs += [(template[0],) + f for f in funcs[n_held:]]
    return _pairs(train_funcs, n_train, rng), _pairs(test_funcs, n_test, rng)


def vocabulary(pairs):
    """Every character the programs use (the tokenizer's alphabet)."""
    return "".join(sorted(set("".join(p.broken + p.fixed for p in pairs))))
