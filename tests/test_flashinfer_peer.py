"""The FlashInfer MLA peer on the CPU: declared as a peer with its package, skipped with a reason
(never an exception) where there is no GPU, and the selection as a page_size = 1 CSR page table
(what FlashInfer's plan() receives) checked against spec.arena_rows."""

from __future__ import annotations

import numpy as np
import pytest

from kernels.sparse_mla import flashinfer_peer, spec


def _point(**kw):
    return {"M": 5, "context": 4096, "selection": "grouped", "page_size": 64, "arena_scale": 1, **kw}


def test_the_variant_is_a_cuda_peer_with_its_package():
    (variant,) = flashinfer_peer.FLASHINFER_VARIANTS
    assert variant.name == "flashinfer_mla" and variant.backend == "cuda"
    assert variant.peer and variant.packages == ("flashinfer-python",)
    assert variant.why


def test_supports_gives_a_reason_without_a_gpu(geometry):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is visible: supports() may legitimately return None here")
    reason = flashinfer_peer.FLASHINFER_VARIANTS[0].supports(geometry, _point())
    assert isinstance(reason, str) and reason.strip()


@pytest.mark.parametrize("page_size", [64, 1])
@pytest.mark.parametrize("selection", ["grouped", "scattered"])
def test_paged_layout_lists_every_valid_slot_row_in_slot_order(geometry, page_size, selection):
    point = _point(page_size=page_size, selection=selection, arena_scale=2)
    inputs = spec.make_inputs(geometry, point, np.random.default_rng(7))
    sel = inputs["selection"].copy()
    sel[3] = -1                                       # stream 3 selects nothing
    sel[1, 5] = -1                                    # a -1 slot among valid ones is dropped too
    rows = spec.arena_rows(point, inputs["page_table"], sel)
    qo_indptr, kv_indptr, kv_indices, kv_len = flashinfer_peer.paged_layout(point, inputs["page_table"], sel)
    for a in (qo_indptr, kv_indptr, kv_indices, kv_len):
        assert a.dtype == np.int32 and a.ndim == 1
    M = point["M"]
    assert np.array_equal(qo_indptr, np.arange(M + 1)), "one query token a stream"
    assert len(kv_len) == M and len(kv_indptr) == M + 1 and kv_indptr[0] == 0
    assert np.array_equal(np.diff(kv_indptr), kv_len), "page_size 1: one page per token"
    assert kv_indptr[-1] == len(kv_indices)
    for m in range(M):
        expected = rows[m][rows[m] >= 0]
        assert kv_len[m] == (sel[m] >= 0).sum() == len(expected)
        assert np.array_equal(kv_indices[kv_indptr[m]:kv_indptr[m + 1]], expected), f"stream {m}"
    assert kv_len[3] == 0 and kv_indptr[3] == kv_indptr[4]
    assert kv_len[1] == (inputs["selection"][1] >= 0).sum() - 1
    assert kv_len[0] == spec.slots_per_stream(geometry, point)[0]
    assert (kv_indices >= 0).all() and kv_indices.max() < spec.arena_pages(point) * page_size


def test_paged_layout_of_an_all_empty_selection():
    point = _point(M=2, context=64, page_size=1)
    table = np.arange(2 * 64, dtype=np.int32).reshape(2, 64)
    sel = np.full((2, 8), -1, dtype=np.int32)
    qo_indptr, kv_indptr, kv_indices, kv_len = flashinfer_peer.paged_layout(point, table, sel)
    assert np.array_equal(kv_len, [0, 0]) and np.array_equal(kv_indptr, [0, 0, 0])
    assert kv_indices.shape == (0,) and kv_indices.dtype == np.int32
    assert np.array_equal(qo_indptr, [0, 1, 2])
