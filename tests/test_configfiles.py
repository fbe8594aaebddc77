"""Config files a program reads, whatever their format: the document is kept with the
run, a key is found at its line, and setting it edits only that value, comments and
layout kept, so the patch a user gets touches one line."""

from __future__ import annotations

import json
import tomllib

import pytest

from magneton.tracer.programs.configfiles import key_line, observed_config_files, set_key

TOML = """# pre-training
[model]
layers = 2  # depth
attn_implementation = 'eager'   # or "sdpa"

[train]
lr = 1e-3
fused = false
"""
YAML = """# pre-training
model:
  layers: 2  # depth
  attn_implementation: eager   # or sdpa
train:
  lr: 1.0e-3
  fused: false
"""


@pytest.fixture(params=["toml", "yaml", "json"])
def config(request, tmp_path):
    fmt = request.param
    text = {"toml": TOML, "yaml": YAML, "json": json.dumps(tomllib.loads(TOML), indent=2)}[fmt]
    path = tmp_path / f"cfg.{fmt}"
    path.write_text(text)
    return fmt, path, text


def _changed_lines(old: str, new: str) -> list[int]:
    a, b = old.splitlines(), new.splitlines()
    assert len(a) == len(b)
    return [n for n, (x, y) in enumerate(zip(a, b, strict=True), start=1) if x != y]


def test_a_key_is_set_where_it_is_and_nothing_else_changes(config):
    fmt, path, text = config
    line = key_line(str(path), ("model", "attn_implementation"))
    assert line is not None
    new = set_key(str(path), ("model", "attn_implementation"), "sdpa", fmt)
    assert new is not None and _changed_lines(text, new) == [line[0]]
    assert "sdpa" in new.splitlines()[line[0] - 1]
    if fmt != "json":
        assert "# depth" in new and "# pre-training" in new  # comments kept
    flipped = set_key(str(path), ("train", "fused"), True, fmt)
    assert flipped is not None and "true" in flipped.lower().split("fused")[1].splitlines()[0]


def test_a_key_that_is_not_a_scalar_of_the_file_is_not_located(config):
    fmt, path, _ = config
    assert key_line(str(path), ("model",)) is None
    assert key_line(str(path), ("model", "heads")) is None
    assert set_key(str(path), ("optim", "lr"), 1.0, fmt) is None


def test_the_documents_a_program_loads_are_kept_with_their_format(tmp_path):
    import yaml

    own = tomllib.load
    (tmp_path / "a.toml").write_text(TOML)
    (tmp_path / "b.yaml").write_text(YAML)
    with observed_config_files() as seen:
        with open(tmp_path / "a.toml", "rb") as f:
            doc = tomllib.load(f)
        with open(tmp_path / "b.yaml") as f:
            yaml.safe_load(f)
    assert [(s.format, s.doc["model"]["layers"]) for s in seen] == [("toml", 2), ("yaml", 2)]
    assert seen[0].doc == doc
    # the loaders are the program's own again afterwards
    assert tomllib.load is own
