"""The user's text data as records: JSONL, CSV or TSV, with TRL's column names.

    records = read_records("data/train.jsonl")       # [Record(values={"prompt": ..., "answer": ...}, where="f:3")]

Format by extension: .jsonl / .json (one JSON object per line), .csv, .tsv / .txt (a header row, then one
record per row). Every problem is one line of one error naming the file and the line: a file that is not
UTF-8, an empty file, a line that is not a JSON object, a line over MAX_LINE_BYTES, a CSV row with another
number of fields than the header. CSV / TSV columns are typed as `datasets` types them (numbers as numbers,
true / false as bools, empty cells as None) for the reward functions; the prompt and answer stay as written.
"""
import csv
import io
import json
import os

from grpo_edge.data.text_files import read_lines
from grpo_edge.errors import ConfigError

MAX_LINE_BYTES = 1 << 20            # 1 MB: a longer line is a broken file, not a prompt for a small model
FORMATS = {".jsonl": "jsonl", ".json": "jsonl", ".csv": "csv", ".tsv": "tsv", ".txt": "tsv"}


class Record(object):
    """One example: its column values and where it came from ('path:line'), for error messages. A CSV / TSV row
    also keeps its raw strings (`text`): the prompt and answer are read as written ("007" stays "007"), while
    `values` holds the columns typed as `datasets` types them (what reward functions receive)."""

    def __init__(self, values, where, text=None):
        self.values, self.where, self.text = values, where, text

    def __repr__(self):
        return "Record(%r, %s)" % (self.values, self.where)


def read_records(path, what="task.data_path"):
    """[Record] of a JSONL, CSV or TSV file (see the module docstring); a ConfigError of one line otherwise."""
    path = str(path)
    if not os.path.isfile(path):
        raise ConfigError("%s %s does not exist (or is not a file)" % (what, path))
    kind = FORMATS.get(os.path.splitext(path)[1].lower())
    if kind is None:
        raise ConfigError("%s %s: unknown format %r (use .jsonl, .csv or .tsv)"
                          % (what, path, os.path.splitext(path)[1] or "no extension"))
    lines = read_lines(path)
    for i, ln in enumerate(lines):
        if len(ln.encode("utf-8")) > MAX_LINE_BYTES:
            raise ConfigError("%s:%d: a line of %d bytes (over %d): not a record of a text dataset"
                              % (path, i + 1, len(ln.encode("utf-8")), MAX_LINE_BYTES))
    records = _jsonl(path, lines) if kind == "jsonl" else _table(path, lines, "," if kind == "csv" else "\t")
    if not records:
        raise ConfigError("%s %s holds no records" % (what, path))
    return records


def _jsonl(path, lines):
    out = []
    for i, ln in enumerate(lines):
        if not ln.strip():
            continue
        try:
            obj = json.loads(ln)
        except ValueError as e:
            raise ConfigError("%s:%d: not JSON (%s)" % (path, i + 1, str(e).splitlines()[0]))
        if not isinstance(obj, dict):
            raise ConfigError("%s:%d: a JSON object per line ({\"prompt\": ..., \"answer\": ...}), got %s"
                              % (path, i + 1, type(obj).__name__))
        out.append(Record(obj, "%s:%d" % (path, i + 1)))
    return out


def _table(path, lines, delimiter):
    """A header row, then records; every row has the header's number of fields. Line numbers count physical
    lines (a quoted field may span several)."""
    reader = csv.reader(io.StringIO("\n".join(lines)), delimiter=delimiter)
    try:
        header = next(reader)
    except StopIteration:
        return []
    except csv.Error as e:
        raise ConfigError("%s:1: %s" % (path, e))
    header = [h.strip() for h in header]
    out = []
    while True:
        line = reader.line_num + 1
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as e:
            raise ConfigError("%s:%d: %s" % (path, line, e))
        if not row or not any(f.strip() for f in row):
            continue
        if len(row) != len(header):
            raise ConfigError("%s:%d: %d fields, the header has %d (%s)"
                              % (path, line, len(row), len(header), ", ".join(header)))
        out.append(Record(dict(zip(header, row)), "%s:%d" % (path, line), dict(zip(header, row))))
    for column in header:
        convert = _column_type(r.text[column] for r in out)
        for r in out:
            r.values[column] = convert(r.text[column])
    return out


_BOOLS = {"true": True, "false": False}


def _is_int(s):
    try:
        int(s)
        return True
    except ValueError:
        return False


def _is_float(s):
    try:
        float(s)
        return True
    except ValueError:
        return False


def _column_type(cells):
    """How a CSV / TSV column reaches a reward function, as `datasets` (pandas) types it: a column whose filled
    cells are all whole numbers -> int, all numbers -> float, all true / false (any case) -> bool, else str;
    an empty cell -> None in every column."""
    filled = [c.strip() for c in cells if c.strip()]
    if filled and all(_is_int(c) for c in filled):
        kind = int
    elif filled and all(_is_float(c) for c in filled):
        kind = float
    elif filled and all(c.lower() in _BOOLS for c in filled):
        def kind(c):
            return _BOOLS[c.lower()]
    else:
        return lambda c: c if c.strip() else None
    return lambda c: kind(c.strip()) if c.strip() else None


def column_text(record, column):
    """record[column] as text: a string (a CSV / TSV cell as written), or a number written as one; a one-line
    error otherwise."""
    if record.text is not None and column in record.text:
        return record.text[column]
    v = record.values.get(column)
    if isinstance(v, list) and v and all(isinstance(m, dict) and "content" in m for m in v):
        raise ConfigError("%s: column %r is a list of chat messages (TRL's conversational form); grpo-edge's "
                          "character models take plain text: write the %s as one string" % (record.where, column,
                                                                                          column))
    if isinstance(v, bool) or not isinstance(v, (str, int, float)):
        raise ConfigError("%s: column %r must be text, got %s" % (record.where, column,
                                                                 "nothing" if v is None else type(v).__name__))
    return v if isinstance(v, str) else json.dumps(v)
