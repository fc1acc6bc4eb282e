"""swe-gym's row sources: what of them is the expected side."""

from __future__ import annotations


def test_the_hubs_caches_are_the_expected_side(monkeypatch, tmp_path):
    """A hub dataset's rows (each with its gold `patch`) are cached under HF_HOME, or where the hub's and the datasets
    library's variables point: the taskset hides every one of them from the agent."""
    from swe_gym.sources import hub_caches

    monkeypatch.delenv("HF_HOME", raising=False)
    for name in ("HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_DATASETS_CACHE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert hub_caches() == [(tmp_path / "xdg" / "huggingface").resolve()]
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "datasets"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert hub_caches() == [(tmp_path / p).resolve() for p in ("hf", "hub", "datasets")]
