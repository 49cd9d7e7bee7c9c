"""The model registry on disk: one folder per trained model, with its model card.

``<models_dir>/<version>/`` holds ``model.joblib`` (the fitted estimator), ``model_card.json``
(training window, features, thresholds, metrics of the model and both baselines, versions) and
``MODEL_CARD.md`` (the same for people). ``<models_dir>/LATEST`` names the version ``predict``
and ``run`` use by default. Writes go to a temporary name first and are renamed into place.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from faultlens.ingest.errors import ModelError

CARD = "model_card.json"
LATEST = "LATEST"


@dataclass
class LoadedModel:
    estimator: Any
    card: dict[str, Any]
    path: Path

    @property
    def version(self) -> str:
        return str(self.card["model_version"])


def default_models_dir(db: Path) -> Path:
    """``data/models`` next to the default database; ``<db folder>/models`` in general."""
    return Path(db).resolve().parent / "models"


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def save_model(models_dir: Path, estimator: Any, card: dict[str, Any]) -> Path:
    """Store a trained model under its version and make it the latest."""
    import joblib

    version = card["model_version"]
    folder = Path(models_dir) / version
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / ".model.joblib.tmp"
    joblib.dump(estimator, tmp)
    os.replace(tmp, folder / "model.joblib")
    _atomic_write(folder / CARD, json.dumps(card, indent=2, default=str).encode())
    _atomic_write(folder / "MODEL_CARD.md", model_card_markdown(card).encode())
    _atomic_write(Path(models_dir) / LATEST, (version + "\n").encode())
    return folder


def load_card(models_dir: Path, version: str | None = None) -> tuple[dict[str, Any], Path]:
    """The model card of ``version`` (default: the latest) and its folder, without loading the
    estimator (nor LightGBM)."""
    models_dir = Path(models_dir)
    if version is None:
        latest = models_dir / LATEST
        if not latest.is_file():
            raise ModelError(f"no trained model in {models_dir}: run `faultlens train` first")
        version = latest.read_text().strip()
    folder = models_dir / version
    if not (folder / "model.joblib").is_file():
        raise ModelError(f"model {version} not found in {models_dir}")
    return json.loads((folder / CARD).read_text()), folder


def load_model(models_dir: Path, version: str | None = None) -> LoadedModel:
    import joblib  # with the estimator's own imports (LightGBM, scikit-learn): seconds

    card, folder = load_card(models_dir, version)
    from faultlens.models.feature_catalog import FEATURES

    if card.get("features") is not None and list(card["features"]) != list(FEATURES):
        theirs, ours = set(card["features"]), set(FEATURES)
        raise ModelError(
            f"model {card.get('model_version')} in {models_dir} was trained on another feature "
            f"set ({len(theirs - ours)} features this faultlens no longer computes, "
            f"{len(ours - theirs)} new: {', '.join(sorted(ours - theirs)[:5]) or 'order'}): "
            "retrain with `faultlens train`"
        )
    return LoadedModel(joblib.load(folder / "model.joblib"), card, folder)


def model_card_markdown(card: dict[str, Any]) -> str:
    m = card["metrics"]
    lines = [
        f"# Model card: {card['model_version']}",
        "",
        f"Failure within {card['horizon_h']:g} h of a node / GPU (target: models/target.py).",
        f"Created {card['created_at']}; data {card['data_window'][0]} .. {card['data_window'][1]}.",
        "",
        "| window | from | to | rows | positives |",
        "|---|---|---|---:|---:|",
    ]
    for w in ("train", "calib", "test"):
        lo, hi = card["windows"][w]
        lines.append(f"| {w} | {lo} | {hi} | {card['rows'][w]:,} | {card['positives'][w]:,} |")
    how = card.get("calibration")
    if how:
        where = (
            f"out-of-fold scores of {how['folds']} node groups"
            if how["method"] == "cross_fit"
            else "the calibration window"
        )
        lines += [
            "",
            f"Calibrator and thresholds fitted on {where}, {how['window'][0]} .. "
            f"{how['window'][1]}; deployed trees fitted on "
            f"{' + '.join(card.get('trees_fitted_on', []))}.",
        ]
    lines += [
        "",
        f"Operating thresholds: {card['thresholds']}; k = {card['k']} nodes per day.",
        "",
        "| scorer | PR-AUC | precision | recall | precision@k | median lead (h) |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name in ("model", "rule_baseline", "lemon_baseline"):
        r = m[name]
        lines.append(
            f"| {name} | {_f(r['pr_auc'])} | {_f(r['precision'])} | {_f(r['recall'])} | "
            f"{_f(r['precision_at_k'])} | {_f(r['median_lead_time_h'])} |"
        )
    defs = card.get("metric_definitions") or {}
    if defs:
        lines += ["", "Definitions:", *(f"- {k}: {v}" for k, v in defs.items())]
    lines += [
        "",
        "Top features by gain: " + ", ".join(f["feature"] for f in card["top_features_by_gain"]),
        "",
        f"{len(card['features'])} features; parameters: `{json.dumps(card['params'])}`",
        "",
    ]
    return "\n".join(lines)


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"
