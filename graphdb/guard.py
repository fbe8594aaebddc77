"""The read-only query guard of `magneton query` and the TUI's console: an allow-list of
read-only clauses, catalog procedures and functions, checked before anything runs.

The engine has no switch that keeps a query from the host: `LOAD '<dir>/x.lbug_extension'`
loaded a shared object (running its constructor) and `LOAD WITH HEADERS (a STRING) FROM
'/etc/passwd'` printed the file, past a guard that refused the clauses it knew to be
dangerous. So this guard names what is known to be safe and refuses everything else:

- A query is a token stream (string literals, `escaped names`, numbers, $parameters and
  comments are tokens of their own, tokenized as the engine's grammar does, so a value
  'CREATE' or a property `load` is never a clause). A character outside the grammar's
  symbols is refused rather than guessed at.
- A word where a clause can begin — the start, after `;` or `{`, after UNION [ALL], or
  right after a finished expression (a name, a literal, `)`, `]`, `}`, `*` of `RETURN *`,
  ASC/DESC, NULL/TRUE/FALSE, END) — must be a keyword of `KEYWORDS`: the reading clauses
  MATCH, OPTIONAL MATCH, UNWIND and CALL, the projections WITH and RETURN, UNION, and the
  words of expressions and patterns. That is where the engine starts LOAD, COPY, ATTACH,
  INSTALL, USE, EXPORT and every write; elsewhere a word is a variable, a label or a
  property (`MATCH (n:Load) RETURN n.load` stays legal).
- The engine's statement heads (`HEADS`: LOAD, COPY, ATTACH, ...) are refused wherever
  they stand bare, as variables too: the engine lets a keyword name a variable, and a
  variable named `load` would otherwise move where the guard thinks a clause begins.
  Backticks make any word a name.
- `CALL` takes a procedure of `PROCEDURES` (catalog listings); `CALL name = value` (an
  engine setting), `read_csv`, `file_info` and the rest are refused.
- A word followed by `(` is a function call and must be in `FUNCTIONS` (the engine's
  scalar, aggregate and rewrite functions minus `REFUSED_FUNCTIONS`, which change state);
  an extension's function is refused until someone adds it here.
  tests/test_guard_allowlist.py holds the lists to the engine's own `show_functions()`:
  a new engine function fails the test until it is classified.
- A query longer than `MAX_QUERY_CHARS` or nested deeper than `MAX_DEPTH` is refused
  before the engine parses it: the engine's parser spent 3 GB on 120 KB of nested
  parentheses and 23.8 GB on a 10 MB list literal (graphdb/contained.py also caps the
  memory of the process that runs a query).

The read-only database is the enforcement of the write refusal behind this guard; the
allow-list is the only thing that keeps files, extensions and other databases out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from magneton.model import MagnetonError

from .opening import _first_line

# Keywords a read-only query may use, anywhere (the engine's grammar, Cypher.g4)
KEYWORDS = frozenset(
    """
    MATCH OPTIONAL WHERE RETURN WITH UNWIND CALL YIELD UNION ALL DISTINCT AS ORDER BY
    SKIP LIMIT ASC ASCENDING DESC DESCENDING AND OR XOR NOT IN IS NULL TRUE FALSE
    STARTS ENDS CONTAINS CASE WHEN THEN ELSE END EXISTS COUNT CAST ANY NONE SINGLE
    SHORTEST WSHORTEST TRAIL ACYCLIC HINT JOIN MULTI_JOIN
    """.split()
)
# keywords that end an expression or a clause: a clause may follow them
_ENDING_KEYWORDS = frozenset("NULL TRUE FALSE END ASC ASCENDING DESC DESCENDING".split())
# The engine's table functions `CALL` may not run: files (read_*, file_info), the host's
# disk and memory (disk_info, disk_size_info, bm_info, fsm_info), the network
# (show_official_extensions) and state (clear_warnings, projected graphs, the cache).
REFUSED_PROCEDURES = frozenset(
    """
    read_csv read_csv_parallel read_csv_serial read_npy read_pandas read_parquet file_info
    disk_info disk_size_info bm_info fsm_info show_official_extensions clear_warnings
    project_graph project_graph_cypher drop_projected_graph _cache_array_column_locally
    """.split()
)
# Catalog procedures `CALL` may run (the engine's table functions that only list the
# catalog); tests/test_guard_allowlist.py checks that every table function the engine
# has is in this list or the one above.
PROCEDURES = frozenset(
    """
    show_tables table_info show_connection db_version current_setting show_functions
    show_indexes show_sequences show_macros show_warnings catalog_version storage_version
    show_graphs show_projected_graphs projected_graph_info show_attached_databases
    show_loaded_extensions storage_info stats_info
    """.split()
)
# Engine functions that change state, refused: the next value of a sequence, the seed
# of random()
REFUSED_FUNCTIONS = frozenset({"nextval", "setseed"})
# The engine's scalar, aggregate and rewrite functions (LadybugDB 0.22 `show_functions`),
# and the type constructors of CAST(x AS DECIMAL(10, 2)) / STRUCT(...)
FUNCTIONS = frozenset(
    """
    abs acos all any array_append array_cat array_concat array_contains
    array_cosine_similarity array_cross_product array_distance array_dot_product
    array_extract array_has array_indexof array_inner_product array_position array_prepend
    array_push_back array_push_front array_slice array_squared_distance array_value asin
    atan atan2 bitshift_left bitshift_right bitwise_and bitwise_or bitwise_xor blob
    cardinality cast cbrt ceil ceiling century coalesce concat concat_ws constant_or_null
    contains cos cot count_if current_date current_timestamp currval date date_part
    date_trunc datepart datetrunc dayname decode degrees duration element_at encode
    ends_with epoch_ms equals error even factorial floor gamma gen_random_uuid greater_than
    greater_than_equals greatest hash ifnull initcap internal_id interval is_acyclic
    is_trail last_day lcase least left less_than less_than_equals levenshtein lgamma
    list_any_value list_append list_cat list_concat list_contains list_creation
    list_distinct list_element list_extract list_filter list_has list_has_all list_has_any
    list_indexof list_max list_min list_position list_prepend list_product list_reduce
    list_reverse list_reverse_sort list_slice list_sort list_sum list_to_string
    list_transform list_unique ln log log10 log2 lower lpad ltrim make_date map map_extract
    map_keys map_values md5 monthname negate nodes none not_equals octet_length offset pi
    pow prefix properties radians random range regexp_extract regexp_extract_all
    regexp_full_match regexp_matches regexp_replace regexp_split_to_array relationships
    rels repeat replace reverse right round rpad rtrim sha256 sign sin single size
    split_part sqrt starts_with str_split string string_split string_to_array
    struct_extract struct_pack substr substring suffix tan time_bucket timestamp to_blob
    to_bool to_date to_days to_double to_epoch_ms to_float to_hours to_int128 to_int16
    to_int32 to_int64 to_int8 to_interval to_microseconds to_milliseconds to_minutes
    to_months to_seconds to_serial to_string to_timestamp to_uint128 to_uint16 to_uint32
    to_uint64 to_uint8 to_uuid to_years tolower toupper trim typeof ucase union_extract
    union_tag union_value upper uuid
    avg collect count count_star histogram max min percentilecont percentiledisc sum
    cost end_node id keys label labels length nullif rowid start_node
    decimal struct union
    """.split()
)
# The engine's statement and clause heads (oC_Statement, the updating and reading clauses
# and their prefixes) that a read-only query never uses: refused wherever they stand bare,
# not only where a clause may begin, so a variable cannot borrow the name and shift where
# the next clause begins (`WITH 1 AS load LOAD FROM ...` is refused by its second word,
# `UNWIND l AS load` by its first). A name in backticks is always a name.
HEADS = frozenset(
    """
    LOAD COPY CREATE MERGE SET DELETE DETACH REMOVE DROP ALTER INSTALL UNINSTALL UPDATE
    FORCE ATTACH USE IMPORT EXPORT CHECKPOINT BEGIN COMMIT ROLLBACK COMMIT_SKIP_CHECKPOINT
    ROLLBACK_SKIP_CHECKPOINT COMMENT ANALYZE EXPLAIN PROFILE PROJECT
    """.split()
)
# Clauses named in refusals: what they do, for the message
_WRITES = frozenset(
    "CREATE MERGE SET DELETE REMOVE DROP ALTER COPY CHECKPOINT COMMENT BEGIN COMMIT "
    "ROLLBACK ANALYZE".split()
) | {"DETACH DELETE"}
_OUTSIDE = frozenset(
    "LOAD INSTALL UNINSTALL UPDATE FORCE ATTACH DETACH USE IMPORT EXPORT".split()
) | {"LOAD FROM", "LOAD EXTENSION", "COPY TO"}
# sizes a query may have (see the module doc)
MAX_QUERY_CHARS = 32_000
MAX_DEPTH = 64
# the grammar's symbols; any other character outside strings and names is refused
_SYMBOLS = set("()[]{},.:;=<>+-*/%^|&!~$?")
_WORD = re.compile(r"[^\W\d]\w*")
_NUMBER = re.compile(r"\d+(?:\.\d+)?(?:[eE]-?\d+)?")


@dataclass(frozen=True)
class Token:
    kind: str  # word, escaped, string, number, param, sym
    text: str


def _string_end(cypher: str, i: int) -> int:
    """Index just past the string literal starting at `i` (a backslash escapes the next
    character, as EscapedChar does; an unterminated string runs to the end)."""
    quote, j, n = cypher[i], i + 1, len(cypher)
    while j < n and cypher[j] != quote:
        j += 2 if cypher[j] == "\\" else 1
    return min(j + 1, n)


def _skip_comment(cypher: str, i: int) -> int:
    """Index past a comment starting at `i`, or `i` when none starts there."""
    if cypher.startswith("//", i):
        j = cypher.find("\n", i)
        return len(cypher) if j < 0 else j + 1
    if cypher.startswith("/*", i):
        j = cypher.find("*/", i + 2)
        return len(cypher) if j < 0 else j + 2
    return i


def _next_token(cypher: str, i: int) -> tuple[Token, int]:
    ch = cypher[i]
    if ch in "'\"":
        j = _string_end(cypher, i)
        return Token("string", cypher[i:j]), j
    if ch == "`":
        j = cypher.find("`", i + 1)
        j = len(cypher) if j < 0 else j + 1
        return Token("escaped", cypher[i:j]), j
    if ch == "$":
        m = _WORD.match(cypher, i + 1) or re.compile(r"\d+").match(cypher, i + 1)
        j = m.end() if m else i + 1
        return Token("param", cypher[i + 1 : j]), j
    m = _NUMBER.match(cypher, i)
    if m:
        return Token("number", m.group(0)), m.end()
    m = _WORD.match(cypher, i)
    if m:
        return Token("word", m.group(0)), m.end()
    return Token("sym", ch), i + 1


def tokens(cypher: str) -> list[Token]:
    """The tokens of a Cypher text, comments and whitespace left out."""
    out: list[Token] = []
    i, n = 0, len(cypher)
    while i < n:
        if cypher[i].isspace():
            i += 1
            continue
        j = _skip_comment(cypher, i)
        if j != i:
            i = j
            continue
        tok, i = _next_token(cypher, i)
        out.append(tok)
    return out


_SYM_OF = {"word": "w", "string": "'", "escaped": "'", "number": "0", "param": "0"}


def _scan(cypher: str) -> tuple[list[tuple[str, str, str]], set[str]]:
    """Bare words as (word, previous symbol, next symbol) — "w" a word, "'" a string or
    escaped name, "0" a number or parameter, else the symbol — and the $parameters used."""
    toks = tokens(cypher)
    marks = [_SYM_OF.get(t.kind, t.text) for t in toks]
    words = [
        (t.text, marks[k - 1] if k else "", marks[k + 1] if k + 1 < len(toks) else "")
        for k, t in enumerate(toks)
        if t.kind == "word"
    ]
    return words, {t.text for t in toks if t.kind == "param" and t.text}


def _words(cypher: str) -> list[tuple[str, str, str]]:
    return _scan(cypher)[0]


def query_params(cypher: str) -> set[str]:
    """Names of the $parameters a Cypher text uses (outside strings and comments)."""
    return _scan(cypher)[1]


def statement_count(cypher: str) -> int:
    """Statements in a Cypher text: `;`-separated parts holding a word (a trailing `;`,
    or one inside a string or comment, starts none)."""
    return sum(1 for k, (_, prev, _) in enumerate(_words(cypher)) if k == 0 or prev == ";")


# --------------------------------------------------------------------------------------
# The allow-list
# --------------------------------------------------------------------------------------


def _is_name(toks: list[Token], k: int) -> bool:
    """A word that can only be a name: a property or label (after `.` or `:`), a map key
    or a variable given a label (before `:`), the object of a property lookup (before
    `.`)."""
    before = toks[k - 1].text if k and toks[k - 1].kind == "sym" else ""
    after = toks[k + 1].text if k + 1 < len(toks) and toks[k + 1].kind == "sym" else ""
    return before in (".", ":") or after in (":", ".")


def _ends_value(toks: list[Token], k: int, ended: bool) -> bool:
    """Whether a clause may begin right after token `k` (`ended`: whether one could
    begin right before it)."""
    tok, nxt = toks[k], toks[k + 1] if k + 1 < len(toks) else None
    if tok.kind in ("string", "escaped", "number", "param"):
        return True
    if tok.kind == "word":
        up = tok.text.upper()
        return _is_name(toks, k) or up not in KEYWORDS or up in _ENDING_KEYWORDS
    if tok.text in ")]}":
        return True
    if tok.text == "*":  # `RETURN *`, `count(*)`, `n.*`; after a value it multiplies
        return not ended
    if tok.text == "!":  # a factorial ends its operand; `!=` is a comparison
        return ended and not (nxt is not None and nxt.text == "=")
    return False


def _clause_start(toks: list[Token], k: int, ended: bool) -> bool:
    if k == 0 or ended:
        return True
    prev = toks[k - 1]
    if prev.kind == "sym":
        return prev.text in (";", "{")
    up = prev.text.upper()
    before = toks[k - 2].text.upper() if k >= 2 else ""
    return up in ("UNION", "EXPLAIN", "PROFILE") or (up == "ALL" and before == "UNION")


def _clause_name(toks: list[Token], k: int) -> str:
    """How a refused clause is named: "DETACH DELETE", "LOAD FROM", "COPY TO", ..."""
    up = toks[k].text.upper()
    nxt = toks[k + 1] if k + 1 < len(toks) else Token("sym", "")
    following = nxt.text.upper() if nxt.kind == "word" else ""
    if up == "DETACH" and following == "DELETE":
        return "DETACH DELETE"
    if up == "LOAD" and following in ("FROM", "WITH"):
        return "LOAD FROM"
    if up == "LOAD" and following == "EXTENSION":
        return "LOAD EXTENSION"
    if up == "COPY" and nxt.text == "(":
        return "COPY TO"
    return up


def _called(toks: list[Token], k: int) -> bool:
    """Word `k` is the procedure of a `CALL` that began a clause (checked there)."""
    if k == 0 or toks[k - 1].kind != "word" or toks[k - 1].text.upper() != "CALL":
        return False
    return _clause_start(toks, k - 1, _ended_before(toks, k - 1))


def _ended_before(toks: list[Token], k: int) -> bool:
    ended = False
    for j in range(k):
        ended = _ends_value(toks, j, ended)
    return ended


def _refused_call(toks: list[Token], k: int) -> str | None:
    """`CALL proc(...)` with `proc` a catalog procedure, else its refusal name."""
    nxt = toks[k + 1] if k + 1 < len(toks) else Token("sym", "")
    after = toks[k + 2] if k + 2 < len(toks) else Token("sym", "")
    if nxt.kind == "word" and nxt.text.lower() in PROCEDURES and after.text == "(":
        return None
    return f"CALL {nxt.text}".rstrip()


def find_write_clause(cypher: str) -> str | None:
    """The first construct of `cypher` that is not on the allow-list (module doc), named
    for the refusal ("CREATE", "DETACH DELETE", "LOAD FROM", "CALL read_csv",
    "function nextval", "character '#'"), or None when the whole query is allowed."""
    toks = tokens(cypher)
    ended = False  # whether the previous token ended an expression or a clause
    for k in range(len(toks)):
        refused = _refusal(toks, k, ended)
        if refused:
            return refused
        ended = _ends_value(toks, k, ended)
    return None


def _refusal(toks: list[Token], k: int, ended: bool) -> str | None:
    tok = toks[k]
    if tok.kind == "sym" and tok.text not in _SYMBOLS:
        return f"character {tok.text!r}"
    if tok.kind != "word" or _is_name(toks, k) or _called(toks, k):
        return None
    up = tok.text.upper()
    if up in HEADS:
        return _clause_name(toks, k)
    at_clause = _clause_start(toks, k, ended)
    if at_clause and up == "CALL":
        return _refused_call(toks, k)
    if at_clause and up not in KEYWORDS:
        return _clause_name(toks, k)
    calls = k + 1 < len(toks) and toks[k + 1].text == "("
    if calls and up not in KEYWORDS and tok.text.lower() not in FUNCTIONS:
        return f"function {tok.text}"
    return None


def check_size(cypher: str) -> None:
    """Refuse a query the engine's parser could spend gigabytes on (module doc)."""
    if len(cypher) > MAX_QUERY_CHARS:
        raise MagnetonError(
            f"query refused: {len(cypher):,} characters of Cypher (at most "
            f"{MAX_QUERY_CHARS:,}); pass large values as parameters (-p NAME=VALUE)"
        )
    depth = deepest = 0
    for tok in tokens(cypher):
        if tok.kind == "sym" and tok.text in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif tok.kind == "sym" and tok.text in ")]}":
            depth -= 1
    if deepest > MAX_DEPTH:
        raise MagnetonError(
            f"query refused: brackets nested {deepest} deep (at most {MAX_DEPTH}); "
            "split the expression with WITH"
        )


def _refused(clause: str) -> MagnetonError:
    if clause == "LOAD FROM":
        return MagnetonError(
            "query refused: LOAD FROM reads files outside the DB, and `magneton query` reads "
            "only the DB (use MATCH ... RETURN ...)"
        )
    if clause in _WRITES or clause == "the query":
        return MagnetonError(
            f"query refused: {clause} writes to the DB, and `magneton query` is read-only "
            "(use MATCH ... RETURN ...)"
        )
    if clause in _OUTSIDE:
        return MagnetonError(
            f"query refused: {clause} reaches outside the DB (files, extensions or other "
            "databases), and `magneton query` reads only the DB (use MATCH ... RETURN ...)"
        )
    if clause.startswith("CALL"):
        return MagnetonError(
            f"query refused: {clause} is not one of the catalog listings `magneton query` "
            "allows (show_tables, table_info, show_functions, ...: CALL show_tables() RETURN *)"
        )
    if clause.startswith("function "):
        return MagnetonError(
            f"query refused: {clause.removeprefix('function ')}() is not on the list of "
            "read-only functions `magneton query` allows (graphdb/guard.py FUNCTIONS)"
        )
    return MagnetonError(
        f"query refused: {clause} is not a read-only clause; `magneton query` allows "
        "MATCH, OPTIONAL MATCH, UNWIND, WITH, RETURN, UNION and CALL of a catalog listing"
    )


def _query_error(e: RuntimeError) -> MagnetonError:
    if "read-only" in str(e):
        return _refused("the query")
    return MagnetonError(f"query failed: {_first_line(e)}")
