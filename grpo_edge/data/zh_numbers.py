"""Chinese numerals <-> integers <-> English number words: the built-in zh-en-numbers pairs.

The mapping, for 0 <= n <= 99,999,999 (Chinese) and 0 <= n <= 999,999,999 (English):

Chinese (standard written reading, simplified characters):
- digits 零一二三四五六七八九; place words 十 (10), 百 (100), 千 (1000) inside a group of four digits, 万 (10^4)
  after the upper group (so 1,234,5678 is read as 一千二百三十四万五千六百七十八).
- A number from 10 to 19 that starts the numeral is 十, 十一 ... 十九 (not 一十); inside a longer numeral
  the one is written: 一百一十 (110), 一千零一十 (1010), 一万零一十 (10010).
- Zeros: one 零 stands for any run of zero digits between two nonzero digits, also across the 万
  boundary (305 三百零五, 1001 一千零一, 10500 一万零五百, 100001 十万零一); trailing zeros are silent
  (2000 二千, 120 一百二十). Zero alone is 零.
- 两 (optional, ``liang=True``): a 2 in the hundreds or thousands place, or a leading 2 before 万, is
  written 两 (两百, 两千零五, 两万); 二 stays for units, tens (二十) and when ``liang=False`` (default).
  ``zh_to_int`` reads both forms.

English (American, no "and", hyphenated tens): zero, one ... nineteen, twenty, twenty-one ...
ninety-nine; "three hundred five", "one thousand one hundred", "twelve thousand three hundred forty-five",
"one million two thousand".
"""
from typing import List, Tuple

ZH_DIGITS = "零一二三四五六七八九"
_ZH_VALUE = dict((c, i) for i, c in enumerate(ZH_DIGITS))
_ZH_VALUE["两"] = 2
_ZH_PLACE = {"十": 10, "百": 100, "千": 1000}

EN_ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
           "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
           "nineteen"]
EN_TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]

ZH_MAX = 99999999
EN_MAX = 999999999


def _zh_group(n: int, leading: bool, liang: bool) -> str:
    """A group 1..9999 in Chinese. leading: the group starts the numeral (allows bare 十 for 10..19)."""
    digits = [n // 1000, n // 100 % 10, n // 10 % 10, n % 10]   # thousands, hundreds, tens, units
    places = ["千", "百", "十", ""]
    out = []
    started = False
    pending_zero = False
    for pos, (d, place) in enumerate(zip(digits, places)):
        if d == 0:
            if started:
                pending_zero = True
            continue
        if pending_zero:
            out.append("零")
            pending_zero = False
        if place == "十" and d == 1 and not started and leading:
            out.append("十")                                 # 十, 十五 at the start of the numeral
        elif d == 2 and liang and place in ("千", "百"):
            out.append("两" + place)
        else:
            out.append(ZH_DIGITS[d] + place)
        started = True
    return "".join(out)


def int_to_zh(n: int, liang: bool = False) -> str:
    """Integer 0..99,999,999 -> Chinese numeral (see the module docstring for the rules)."""
    if not isinstance(n, int) or n < 0 or n > ZH_MAX:
        raise ValueError("int_to_zh: %r is outside 0..%d" % (n, ZH_MAX))
    if n == 0:
        return "零"
    high, low = divmod(n, 10000)
    out = ""
    if high:
        if high == 2 and liang:
            out = "两万"
        else:
            out = _zh_group(high, leading=True, liang=liang) + "万"
    if low:
        if high and low < 1000:
            out += "零"                                      # 一万零五百, 十万零一
        out += _zh_group(low, leading=not high, liang=liang)
    return out


def _zh_group_to_int(text: str, full: str) -> int:
    total, digit = 0, None
    for c in text:
        if c in _ZH_VALUE:
            digit = _ZH_VALUE[c]
        elif c in _ZH_PLACE:
            total += (1 if digit is None else digit) * _ZH_PLACE[c]
            digit = None
        else:
            raise ValueError("not a Chinese numeral: %r" % full)
    return total + (digit or 0)


def zh_to_int(text: str) -> int:
    """Chinese numeral (as written by ``int_to_zh``, 二 or 两) -> integer."""
    if not text or text.count("万") > 1:
        raise ValueError("not a Chinese numeral: %r" % text)
    high, sep, low = text.partition("万")
    if sep:
        if not high:
            raise ValueError("not a Chinese numeral: %r" % text)
        return _zh_group_to_int(high, text) * 10000 + _zh_group_to_int(low, text)
    return _zh_group_to_int(text, text)


def _en_below_1000(n: int) -> List[str]:
    words = []
    hundreds, rest = divmod(n, 100)
    if hundreds:
        words += [EN_ONES[hundreds], "hundred"]
    if rest >= 20:
        tens, ones = divmod(rest, 10)
        words.append(EN_TENS[tens] + ("-" + EN_ONES[ones] if ones else ""))
    elif rest:
        words.append(EN_ONES[rest])
    return words


def int_to_en(n: int) -> str:
    """Integer 0..999,999,999 -> English words (see the module docstring)."""
    if not isinstance(n, int) or n < 0 or n > EN_MAX:
        raise ValueError("int_to_en: %r is outside 0..%d" % (n, EN_MAX))
    if n == 0:
        return "zero"
    millions, rest = divmod(n, 1000000)
    thousands, units = divmod(rest, 1000)
    words = []
    if millions:
        words += _en_below_1000(millions) + ["million"]
    if thousands:
        words += _en_below_1000(thousands) + ["thousand"]
    words += _en_below_1000(units)
    return " ".join(words)


def number_pairs(max_number: int = 9999, liang: bool = False) -> List[Tuple[str, str]]:
    """All (Chinese, English) pairs for 0..max_number, in numeric order."""
    if max_number < 1 or max_number > ZH_MAX:
        raise ValueError("max_number must be in 1..%d, got %r" % (ZH_MAX, max_number))
    return [(int_to_zh(i, liang), int_to_en(i)) for i in range(max_number + 1)]
