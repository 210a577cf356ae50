"""Every mock fault × every client behaviour, through each reference proxy over real sockets.

The whole matrix runs once per module (lanes side by side, about 20 s); each cell is then its
own test id, failing with the list of assertions it broke. ``print_matrix.py`` prints the same
results as the README's table.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from reliability_support import (
    CLIENTS,
    FAULTS,
    NOT_APPLICABLE,
    REFERENCE_TARGETS,
    CellResult,
    run_matrix,
)

pytestmark = [pytest.mark.slow, pytest.mark.sockets]


@pytest.fixture(scope="module", params=list(REFERENCE_TARGETS))
def matrix(request: pytest.FixtureRequest) -> Iterator[dict[tuple[str, str], CellResult]]:
    """The whole matrix through one reference: httpx (notebook 06's) or aiohttp."""
    yield run_matrix(target=REFERENCE_TARGETS[request.param])


@pytest.mark.parametrize("client", CLIENTS)
@pytest.mark.parametrize("fault", [f.name for f in FAULTS])
def test_cell(matrix: dict[tuple[str, str], CellResult], fault: str, client: str) -> None:
    cell = matrix[(fault, client)]
    if not cell.applicable:
        pytest.skip(NOT_APPLICABLE)
    assert not cell.failures, f"{fault} × {client}: " + "; ".join(cell.failures)


def test_matrix_covers_every_cell(matrix: dict[tuple[str, str], CellResult]) -> None:
    assert set(matrix) == {(f.name, c) for f in FAULTS for c in CLIENTS}


def test_clients_that_leave_stop_the_upstream_promptly(
    matrix: dict[tuple[str, str], CellResult],
) -> None:
    """The cells measured a stop lag wherever the client really hung up mid-generation."""
    lags = [
        cell.evidence["stop_lag_s"] for cell in matrix.values() if "stop_lag_s" in cell.evidence
    ]
    # every non-status fault in the two leaving lanes (status cells end before anyone leaves)
    assert len(lags) >= 2 * (len(FAULTS) - 4), lags
