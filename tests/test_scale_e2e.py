"""A real-size pair of the corpus (benchmarks/scale.py), end to end through the CLI as a
user runs it: the BERT encoder with `chunk_size_feed_forward=8` vs `0` whose diff died
with a segfault inside Kùzu 0.11.3. Here at 3 layers (about 750 operators on the
chunked side: past the ~600 at which Kùzu's kernel-path query returned garbage) to keep
the suite short; benchmarks/scale.py runs it at 12 layers with the other real-size pairs."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest
import warm_cli

if importlib.util.find_spec("transformers") is None:  # not imported: its recordings do
    pytest.skip("needs transformers", allow_module_level=True)

PAIR = Path(__file__).resolve().parents[1] / "examples" / "scale" / "bert_base_chunk"


def magneton(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return warm_cli.run(args, cwd=cwd, timeout=900)


def test_bert_chunked_feed_forward_is_diagnosed_to_its_config_value(tmp_path: Path) -> None:
    for side in ("a", "b"):
        text = (PAIR / f"{side}.py").read_text()
        assert "num_hidden_layers=12" in text
        (tmp_path / f"{side}.py").write_text(
            text.replace("num_hidden_layers=12", "num_hidden_layers=3")
        )
        rec = magneton("record", f"{side}.py", "--db", "db", "--run", side, "-q", cwd=tmp_path)
        assert rec.returncode == 0, rec.stderr[-2000:]
    # --no-rerun: what this size tests is the diagnosis's queries and dataflow over ~750
    # operators; the rounds and the key-variable re-run of an HF pair (13-25 s more here)
    # run in the case suite's gelu_backend and in test_demo
    diff = magneton("diff", "--db", "db", "a", "b", "--json", "--no-rerun", cwd=tmp_path)
    assert diff.returncode == 0, diff.stderr[-2000:]
    result = json.loads(diff.stdout)
    causes = [f["root_cause"] or {} for f in result["findings"] if f["wasteful"] == "a"]
    assert any(
        c.get("variable") == "chunk_size_feed_forward"
        and "chunk_size_feed_forward=8" in (c.get("code") or "")
        and Path(c.get("file") or "").name == "a.py"
        for c in causes
    ), [(c.get("kind"), c.get("variable"), c.get("code")) for c in causes]
