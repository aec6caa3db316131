"""The structural detector: one synthetic frame pair per rule, plus properties."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from daemon.screen.detector import Diff, compare, grid_shape, signature

# 1600x1000: the top 8 % is exactly 80 rows, and the 920 rows below split into 40 block rows
# of 23 pixels; 1600 columns into 80 block columns of 20. 3200 blocks, 1 % of them is 32.
W, H, TOP, BH, BW = 1600, 1000, 80, 23, 20


def grey(value: int = 100, w: int = W, h: int = H) -> np.ndarray:
    return np.full((h, w, 3), value, np.uint8)


def with_blocks(image: np.ndarray, count: int, delta: int = 50, channel: int | None = None):
    """A copy of `image` with the first `count` blocks (row-major, below the bar) changed."""
    out = image.copy()
    for k in range(count):
        r, c = divmod(k, 80)
        block = out[TOP + r * BH : TOP + (r + 1) * BH, c * BW : (c + 1) * BW]
        if channel is None:
            block += np.uint8(delta)
        else:
            block[:, :, channel] += np.uint8(delta)
    return out


def diff(a: np.ndarray, b: np.ndarray, threshold: float = 2.0) -> Diff:
    return compare(signature(a), signature(b), threshold)


def test_grid_is_80_along_the_longer_axis() -> None:
    assert grid_shape(1920, 1080) == (40, 80)
    assert grid_shape(1080, 2400) == (80, 40)
    assert signature(grey()).blocks.shape == (40, 80, 3)
    assert signature(grey(w=1000, h=1600)).blocks.shape == (80, 40, 3)


def test_a_change_only_inside_the_top_8_percent_is_ignored() -> None:
    after = grey()
    after[:TOP] = 255  # status bar: clock, battery, notifications
    d = diff(grey(), after)
    assert not d.changed
    assert d.changed_blocks == 0
    assert d.max_block_diff == 0.0


def test_the_first_row_below_the_status_bar_counts() -> None:
    after = grey()
    after[TOP] = 255  # one pixel row: 155/23 ≈ 6.7 in each block of the first block row
    d = diff(grey(), after)
    assert d.changed
    assert d.changed_blocks == 80
    assert d.max_block_diff == pytest.approx(155 / 23, abs=1e-3)


def test_exactly_one_percent_of_blocks_is_not_a_change() -> None:
    d = diff(grey(), with_blocks(grey(), 32))
    assert (d.changed, d.changed_blocks, d.total_blocks) == (False, 32, 3200)
    assert d.changed_fraction == 0.01
    assert d.max_block_diff == 50.0


def test_just_above_one_percent_is_a_change() -> None:
    d = diff(grey(), with_blocks(grey(), 33))
    assert (d.changed, d.changed_blocks) == (True, 33)


def test_a_block_must_exceed_the_threshold_not_reach_it() -> None:
    after = with_blocks(grey(), 100, delta=2)
    at = diff(grey(), after, threshold=2.0)
    assert (at.changed, at.changed_blocks, at.max_block_diff) == (False, 0, 2.0)
    below = diff(grey(), after, threshold=1.99)
    assert (below.changed, below.changed_blocks) == (True, 100)


def test_the_block_metric_is_the_largest_channel_difference() -> None:
    # Blue alone moves by 3: the channel mean would be 1 (below 2), the max over channels is 3.
    d = diff(grey(), with_blocks(grey(), 40, delta=3, channel=0))
    assert (d.changed, d.changed_blocks, d.max_block_diff) == (True, 40, 3.0)


def test_a_resolution_change_is_a_change() -> None:
    for other in (grey(w=W, h=H + 1), grey(w=W // 2, h=H // 2)):
        d = diff(grey(), other)
        assert d.changed
        assert d.changed_fraction == 1.0


def test_block_means_equal_inter_area_where_the_size_divides() -> None:
    image = np.random.default_rng(1).integers(0, 256, (H, W, 3), dtype=np.uint8)
    area = cv2.resize(image[TOP:], (80, 40), interpolation=cv2.INTER_AREA)
    # INTER_AREA rounds its means to uint8; ours are exact.
    assert np.abs(signature(image).blocks - area).max() <= 0.5


def test_images_smaller_than_the_grid_have_no_empty_blocks() -> None:
    sig = signature(grey(w=10, h=5))
    assert sig.blocks.shape == (4, 10, 3)  # 5 rows minus 1 status-bar row
    assert np.all(sig.blocks == 100)


def test_grayscale_frames_work() -> None:
    a = np.full((H, W), 10, np.uint8)
    assert not compare(signature(a), signature(a.copy()), 2.0).changed


def test_to_dict_is_the_last_diff_shape() -> None:
    d = diff(grey(), with_blocks(grey(), 33)).to_dict()
    assert d == {
        "changed": True,
        "changed_fraction": 0.0103,
        "max_block_diff": 50.0,
        "changed_blocks": 33,
        "total_blocks": 3200,
    }


def test_negative_threshold_is_rejected() -> None:
    with pytest.raises(ValueError):
        diff(grey(), grey(), threshold=-1)


images = st.tuples(st.integers(1, 60), st.integers(1, 90)).flatmap(
    lambda hw: arrays(np.uint8, (hw[0], hw[1], 3))
)


@settings(max_examples=200, deadline=None)
@given(images, st.floats(0, 255))
def test_identical_frames_are_never_a_change(image: np.ndarray, threshold: float) -> None:
    d = compare(signature(image), signature(image.copy()), threshold)
    assert not d.changed
    assert d.changed_blocks == 0
    assert d.max_block_diff == 0.0


@settings(max_examples=200, deadline=None)
@given(
    st.tuples(st.integers(1, 60), st.integers(1, 90)).flatmap(
        lambda hw: st.tuples(arrays(np.uint8, (*hw, 3)), arrays(np.uint8, (*hw, 3)))
    ),
    st.floats(0, 255),
)
def test_compare_is_symmetric(pair: tuple[np.ndarray, np.ndarray], threshold: float) -> None:
    a, b = signature(pair[0]), signature(pair[1])
    assert compare(a, b, threshold) == compare(b, a, threshold)
