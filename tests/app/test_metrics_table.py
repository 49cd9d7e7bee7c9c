"""The train / demo metrics table never prints a ratio without support: one true alert of two is
not "precision 0.500", and no failure in the window is not "recall 0.000"."""

from __future__ import annotations

from rich.console import Console

from faultlens.app.cmd_models import MIN_SUPPORT, metrics_table


def _render(metrics: dict) -> str:
    console = Console(width=200, record=True)
    console.print(metrics_table(metrics, "t"))
    return console.export_text()


def _m(alerts: int, true_alerts: int, episodes: int, caught: int) -> dict:
    return {
        "pr_auc": 0.2,
        "precision": true_alerts / alerts if alerts else None,
        "recall": caught / episodes if episodes else None,
        "precision_at_k": 0.1,
        "median_lead_time_h": 5.0 if caught else None,
        "alerts": alerts,
        "true_alerts": true_alerts,
        "failure_episodes": episodes,
        "caught": caught,
    }


def test_small_counts_are_shown_as_counts_not_ratios() -> None:
    # the demo's case: 2 alerts, one matched a failure just after the window; 3 failures, none
    # caught
    text = _render({"model": _m(2, 1, 3, 0)})
    assert "0.500" not in text and "0.000" not in text
    assert "1 of 2 alerts true (too few)" in text
    assert "0 of 3 failures caught (too few)" in text
    assert "none caught" in text


def test_no_alerts_and_no_failures_say_so() -> None:
    text = _render({"model": _m(0, 0, 0, 0) | {"pr_auc": None}})
    assert "no alerts" in text and "no failures" in text


def test_supported_ratios_keep_their_counts() -> None:
    n = MIN_SUPPORT * 4
    text = _render({"model": _m(n, n - 2, n, n // 2)})
    assert f"{(n - 2) / n:.3f} ({n - 2}/{n})" in text
    assert f"{0.5:.3f} ({n // 2}/{n})" in text
