"""Training the failure model's trees on a Dask cluster with ``lightgbm.dask``.

``faultlens train --dask tcp://scheduler:8786`` (or ``--dask local --workers N``) builds the
feature table where the database is, as always, then hands the training rows to the Dask
workers: they are split by rows into one partition per worker, and LightGBM's distributed
data-parallel learner builds the trees with every worker holding its share (each worker opens a
port for LightGBM's own collective; on a real cluster those ports must be reachable between
workers — ``local_listen_port`` / firewall notes in README "Scaling out"). The result is turned
into an ordinary ``LGBMClassifier`` (``to_local``) so calibration, scoring, contributions and the
saved model are the same as for local training.
"""

from __future__ import annotations

import logging
import math
from typing import Any

import lightgbm as lgb
import numpy as np

log = logging.getLogger(__name__)


def _lightgbm_logs_to_logging() -> None:
    """LightGBM prints its messages (and its C++ library's) on stdout; send them to ``logging``
    (stderr) instead, so that ``--json`` output stays one clean document."""
    lgb.register_logger(logging.getLogger("lightgbm"))


def worker_count(client: Any) -> int:
    return len(client.scheduler_info().get("workers", {}))


def fit_on_dask(
    client: Any,
    X: np.ndarray,
    y: np.ndarray,
    sample_weight: np.ndarray | None,
    params: dict[str, Any],
) -> lgb.LGBMClassifier:
    """Fit ``LGBMClassifier(**params)`` on ``X, y`` across the client's workers; a local model."""
    import dask.array as da

    n = worker_count(client)
    if n == 0:
        raise RuntimeError("the Dask cluster has no workers")
    rows = max(math.ceil(len(y) / n), 1)
    dX = da.from_array(X, chunks=(rows, X.shape[1]))
    dy = da.from_array(y, chunks=rows)
    dw = None if sample_weight is None else da.from_array(sample_weight, chunks=rows)
    # Each worker trains with its own threads; a process-level n_jobs makes no sense remotely.
    params = {k: v for k, v in params.items() if k not in ("n_jobs", "force_col_wise")}
    _lightgbm_logs_to_logging()
    client.run(_lightgbm_logs_to_logging)
    model = lgb.DaskLGBMClassifier(client=client, **params)
    log.info("training on %d Dask workers, %d rows in partitions of %d", n, len(y), rows)
    model.fit(dX, dy, sample_weight=dw)
    return model.to_local()
