"""The bundled rules' parse cache: the same rules as from the YAML, a changed file is a miss,
a damaged cache is ignored, and what is cached is plain JSON."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from crashlens.rulebase import load as loader


def _summary(rules) -> list[tuple]:
    return [
        (r.id, r.cls, r.title, r.severity, r.kind, r.remediation, r.explains,
         tuple((d.name, d.pattern.pattern, d.literals, d.scope) for d in r.detectors))
        for r in rules.rules
    ]  # fmt: skip


@pytest.fixture()
def bundle(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the bundled rules as the default rule base, and an empty cache directory."""
    copy = tmp_path / "rules"
    shutil.copytree(loader.default_rules_dir(), copy)
    monkeypatch.setattr(loader, "default_rules_dir", lambda: copy)
    monkeypatch.setenv("CRASHLENS_CACHE_DIR", str(tmp_path / "cache"))
    return copy


def test_cached_rules_are_the_rules(bundle: Path, tmp_path: Path, monkeypatch) -> None:
    first = loader.load_rules()  # parses, writes the cache
    (cache,) = (tmp_path / "cache").glob("rules-*.json")
    assert isinstance(json.loads(cache.read_text()), dict)  # JSON, never pickled objects
    cached = loader.load_rules()
    monkeypatch.setenv("CRASHLENS_CACHE_DIR", "off")
    fresh = loader.load_rules()
    assert _summary(cached) == _summary(first) == _summary(fresh)
    assert len(cached.rules) > 90


def test_a_changed_rule_file_is_not_served_from_the_cache(bundle: Path) -> None:
    loader.load_rules()
    rule = bundle / "memory" / "cuda-oom.yaml"
    rule.write_text(rule.read_text().replace("title: ", "title: Edited ", 1))
    titles = {r.id: r.title for r in loader.load_rules().rules}
    assert titles["cuda-oom"].startswith("Edited ")
    # and a broken edit is reported with its file, not hidden by the cache
    rule.write_text("id: cuda-oom\ntitle: [unclosed\n")
    with pytest.raises(Exception, match=r"cuda-oom\.yaml"):
        loader.load_rules()


def test_a_damaged_or_unwritable_cache_is_ignored(
    bundle: Path, tmp_path: Path, monkeypatch
) -> None:
    want = _summary(loader.load_rules())
    (cache,) = (tmp_path / "cache").glob("rules-*.json")
    cache.write_text('{"truncated": ')
    assert _summary(loader.load_rules()) == want
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv("CRASHLENS_CACHE_DIR", str(blocker / "cache"))
    assert _summary(loader.load_rules()) == want


def test_a_cache_directory_keeps_only_the_newest_caches(
    bundle: Path, tmp_path: Path, monkeypatch
) -> None:
    # Every edit of a rule file writes a new cache; the old ones go, the newest stay, and
    # nothing else in the directory is touched.
    import os

    where = tmp_path / "cache"
    where.mkdir()
    other = where / "notes.txt"
    other.write_text("mine")
    old = []
    for i in range(loader.KEEP_CACHES + 3):
        stale = where / f"rules-{i:024d}.json"
        stale.write_text("{}")
        os.utime(stale, (1_000_000 + i, 1_000_000 + i))
        old.append(stale)
    loader.load_rules()  # a miss: parses, writes, prunes
    kept = sorted(where.glob("rules-*.json"))
    assert len(kept) == loader.KEEP_CACHES
    newest = max(kept, key=lambda p: p.stat().st_mtime)
    assert newest not in old  # the cache just written
    assert set(kept) - {newest} == set(old[-(loader.KEEP_CACHES - 1) :])
    assert other.read_text() == "mine"
    assert _summary(loader.load_rules()) == _summary(loader.load_rules())  # and it is served
