"""The read-only query guard: `magneton query` refuses write clauses and `LOAD FROM`
(host files) before running anything.

The Cypher is tokenized, skipping string literals, escaped names and comments, so a
value 'CREATE', a property `settings` or a '$x' inside a string is never taken for a
clause or a parameter. The read-only database is the real enforcement of the write
refusal; this guard words it before the engine is reached, and is the only check that
keeps `LOAD FROM` (which reads any file the user can) out.
"""

from __future__ import annotations

import re

from magneton.model import MagnetonError

from .opening import _first_line

_WRITE_CLAUSES = {
    "CREATE",
    "MERGE",
    "SET",
    "DELETE",
    "DETACH",
    "REMOVE",
    "COPY",
    "DROP",
    "ALTER",
    "INSTALL",
    "UNINSTALL",
    "ATTACH",
    "IMPORT",
    "EXPORT",
    "CHECKPOINT",
    "COMMENT",
}
# CALL <procedure>: procedures whose name starts like this change the DB or files.
_WRITE_PROCEDURE = re.compile(
    r"^(create|drop|alter|delete|insert|update|set|import|export|install|load)_", re.I
)
_IDENT_START = re.compile(r"[A-Za-z_]")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _scan(cypher: str) -> tuple[list[tuple[str, str, str]], set[str]]:
    """Bare words of a Cypher text as (word, previous symbol, next symbol), and the
    names of the $parameters it uses.

    String literals, `escaped names`, numbers and comments are skipped, so a value
    'CREATE', a property `settings` or a '$x' inside a string is never taken for a clause
    or a parameter.
    """
    out: list[tuple[str, str, str]] = []
    params: set[str] = set()
    i, n = 0, len(cypher)
    prev = ""
    pending: list[int] = []  # indices in `out` still waiting for their next symbol
    while i < n:
        ch = cypher[i]
        if ch.isspace():
            i += 1
            continue
        if ch in "'\"":
            j = i + 1
            while j < n and cypher[j] != ch:
                j += 2 if cypher[j] == "\\" else 1
            i, sym = j + 1, "'"
        elif ch == "`":
            j = cypher.find("`", i + 1)
            i, sym = (n if j < 0 else j + 1), "`"
        elif cypher.startswith("//", i):
            j = cypher.find("\n", i)
            i = n if j < 0 else j + 1
            continue
        elif cypher.startswith("/*", i):
            j = cypher.find("*/", i + 2)
            i = n if j < 0 else j + 2
            continue
        elif ch == "$":
            m = _IDENT.match(cypher, i + 1)
            if m:
                params.add(m.group(0))
            i, sym = (m.end() if m else i + 1), "0"
        elif ch.isdigit():
            j = i + 1
            while j < n and (cypher[j].isalnum() or cypher[j] in "_."):
                j += 1
            i, sym = j, "0"
        elif _IDENT_START.match(ch):
            m = _IDENT.match(cypher, i)
            assert m is not None
            word = m.group(0)
            for k in pending:
                out[k] = (out[k][0], out[k][1], "w")
            pending = [len(out)]
            out.append((word, prev, ""))
            prev = "w"
            i = m.end()
            continue
        else:
            i, sym = i + 1, ch
        for k in pending:
            out[k] = (out[k][0], out[k][1], sym)
        pending = []
        prev = sym
    return out, params


def _words(cypher: str) -> list[tuple[str, str, str]]:
    return _scan(cypher)[0]


def query_params(cypher: str) -> set[str]:
    """Names of the $parameters a Cypher text uses (outside strings and comments)."""
    return _scan(cypher)[1]


def statement_count(cypher: str) -> int:
    """Statements in a Cypher text: `;`-separated parts holding a word (a trailing `;`,
    or one inside a string or comment, starts none)."""
    return sum(1 for k, (_, prev, _) in enumerate(_words(cypher)) if k == 0 or prev == ";")


def find_write_clause(cypher: str) -> str | None:
    """The first clause of `cypher` that `magneton query` refuses, or None: one that
    would write (e.g. "DETACH DELETE"), or one that reaches outside the DB (`LOAD FROM`
    reads any file the user can read: /etc/passwd came back as rows)."""
    words = _words(cypher)
    for k, (word, prev, nxt) in enumerate(words):
        # `n.set`, `:Create` (a label), `{delete: 1}` (a map key) are names, not clauses
        if prev in (".", ":") or nxt == ":":
            continue
        upper = word.upper()
        following = words[k + 1][0] if k + 1 < len(words) else ""
        if upper in _WRITE_CLAUSES:
            if upper == "DETACH" and following.upper() == "DELETE":
                return "DETACH DELETE"
            return upper
        if upper == "LOAD" and following.upper() in ("EXTENSION", "FROM"):
            return f"LOAD {following.upper()}"
        if upper == "CALL" and _WRITE_PROCEDURE.match(following):
            return f"CALL {following}"
    return None


def _refused(clause: str) -> MagnetonError:
    if clause == "LOAD FROM":
        return MagnetonError(
            "query refused: LOAD FROM reads files outside the DB, and `magneton query` reads "
            "only the DB (use MATCH ... RETURN ...)"
        )
    return MagnetonError(
        f"query refused: {clause} writes to the DB, and `magneton query` is read-only "
        "(use MATCH ... RETURN ...)"
    )


def _query_error(e: RuntimeError) -> MagnetonError:
    if "read-only" in str(e):
        return _refused("the query")
    return MagnetonError(f"query failed: {_first_line(e)}")
