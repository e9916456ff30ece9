"""Reading the user's text files (pairs, monolingual text): one place for the encoding rules."""
from typing import List

from grpo_edge.errors import GrpoEdgeError


def read_lines(path: str) -> List[str]:
    """The lines of a UTF-8 text file (a BOM is allowed); a one-line error if it is not UTF-8."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        return data.decode("utf-8-sig").splitlines()
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise GrpoEdgeError("%s:%d: not UTF-8 text (byte 0x%02x); re-save the file as UTF-8"
                            % (path, line, data[e.start])) from None
