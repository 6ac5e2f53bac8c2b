"""reference.fp8: accumulator declarations, exact e4m3 sums, accumulator emulation and its bound, FP8 quantizers.

Expected values are derived by hand (comments), from an independent e4m3 decoding, or from the tools themselves
(compressed-tensors, torchao)."""

import numpy as np
import pytest
import torch
from fp8_kernels import emulated_accumulator
from hypothesis import given, settings
from hypothesis import strategies as st

from reference.errors import ContractError, OperandError
from reference.fp8 import (
    E4M3,
    MIN_SCALING_FACTOR,
    PRODUCT_SHIFT,
    AccumulatorModel,
    accumulation_bound,
    e4m3_fixed,
    emulate_accumulation,
    exact_fp8_mm,
    exact_sum_fp32,
    fixed_to_fp32,
    parse_accumulator,
    quantize_activation_fp8_per_tensor,
    quantize_activation_fp8_per_token,
    quantize_weight_fp8_per_channel,
    representable_fp32,
    to_e4m3_saturated,
)

FINITE_BYTES = [b for b in range(256) if b & 0x7F != 0x7F]


def decode(byte: int) -> float:
    """e4m3fn by its definition: 1 sign, 4 exponent (bias 7), 3 mantissa bits; 0x7F/0xFF NaN; no infinities."""
    sign = -1.0 if byte & 0x80 else 1.0
    e, m = (byte >> 3) & 0xF, byte & 7
    return sign * (m * 2.0**-9 if e == 0 else (8 + m) * 2.0 ** (e - 10))


def e4m3(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32).to(E4M3)


def u8(t: torch.Tensor) -> list:
    return t.contiguous().view(torch.uint8).flatten().tolist()


# --- accumulator declarations ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text", ["exact", "fp32", "fp32 promote=64", "fp32 bits=14 truncate promote=128", "fp32 bits=10 rne"]
)
def test_parse_label_round_trip(text):
    model = parse_accumulator(text)
    assert model.label() == text and parse_accumulator(model.label()) == model
    assert parse_accumulator(model.to_dict()) == model and parse_accumulator(model) is model


def test_parse_fields_and_errors():
    m = parse_accumulator("fp32 truncate bits=14 promote=128")
    assert m == AccumulatorModel("fp32", 14, "truncate", 128) and not m.precise
    assert parse_accumulator("fp32 promote=4").precise and parse_accumulator("exact").precise
    for bad in ["", "fp16", "fp32 bits=25", "fp32 bits=x", "fp32 round", "exact promote=4", "fp32 promote=0", 7]:
        with pytest.raises(ContractError):
            parse_accumulator(bad)
    with pytest.raises(ContractError, match="unknown key"):
        parse_accumulator({"kind": "fp32", "width": 3})


# --- exact arithmetic -----------------------------------------------------------------------------------------------


def test_e4m3_fixed_all_256_bytes():
    x = torch.tensor(FINITE_BYTES, dtype=torch.uint8).view(E4M3)
    fixed = e4m3_fixed(x)
    want = [decode(b) * 2**9 for b in FINITE_BYTES]
    assert all(w == int(w) for w in want) and fixed.dtype == torch.int64
    assert fixed.tolist() == [int(w) for w in want]
    assert (fixed.double() / 2**9).tolist() == x.float().double().tolist()  # round trip through torch's decoding
    assert int(fixed.abs().max()) == 448 * 2**9 and sorted(set(fixed.abs().tolist()))[:3] == [0, 1, 2]
    for nan in (0x7F, 0xFF):
        with pytest.raises(OperandError, match=r"x has 1 NaN value\(s\) \(first at \(1,\)\)"):
            e4m3_fixed(torch.tensor([0, nan], dtype=torch.uint8).view(E4M3))
    grid = torch.tensor(FINITE_BYTES[:250], dtype=torch.uint8).view(E4M3).reshape(25, 10)
    assert torch.equal(e4m3_fixed(grid.t()), e4m3_fixed(grid).t())  # any strides
    with pytest.raises(OperandError, match="float8_e4m3fn"):
        e4m3_fixed(torch.zeros(2))


def test_exact_fp8_mm_against_python_integers_and_strides():
    g = torch.Generator().manual_seed(5)
    k = 2**16 + 5  # more than one float64 K-chunk
    pick = torch.tensor(FINITE_BYTES, dtype=torch.uint8)
    a = pick[torch.randint(len(FINITE_BYTES), (3, k), generator=g)].view(E4M3)
    bt = pick[torch.randint(len(FINITE_BYTES), (k, 2), generator=g)].view(E4M3)
    b = bt.t()  # [N, K] column-major view
    fa, fb = e4m3_fixed(a).tolist(), e4m3_fixed(b).tolist()
    want = [[sum(x * y for x, y in zip(ra, rb)) for rb in fb] for ra in fa]
    got = exact_fp8_mm(a, b)
    assert got.dtype == torch.int64 and got.tolist() == want


def test_exact_sum_fp32_rounds_once():
    # 256 + 3 * 2**-16 (products 16*16 and three 2**-8 * 2**-8): the float32 spacing at 256 is 2**-15, so this is a
    # tie between 256 + 2**-15 (odd) and 256 + 2**-14 (even): one RNE gives 256 + 2**-14. Sequential float32 adds
    # round each 256 + 2**-16 (a tie) back to 256.
    a = e4m3([[16.0, 2**-8, 2**-8, 2**-8]])
    assert exact_fp8_mm(a, a).item() == 256 * 2**18 + 3 * 2**2
    assert exact_sum_fp32(a, a).item() == 256 + 2**-14
    assert emulate_accumulation(a, a, "fp32").item() == 256.0
    with pytest.raises(OperandError, match="K mismatch"):
        exact_fp8_mm(a, e4m3([[1.0]]))
    with pytest.raises(OperandError, match=r"b has 1 NaN"):
        exact_fp8_mm(a, torch.tensor([[0, 0, 0x7F, 0]], dtype=torch.uint8).view(E4M3))


def test_fixed_to_fp32_and_representable():
    # beyond 2**53: 2**60 + 2**36 is a tie between 2**60 and 2**60 + 2**37 -> even (2**60); one more unit -> up
    num = torch.tensor([2**60 + 2**36, 2**60 + 2**36 + 1, -(2**24 + 1), 3], dtype=torch.int64)
    assert fixed_to_fp32(num, 18).tolist() == [2.0**42, 2.0**42 + 2.0**19, -(2.0**24) * 2**-18, 3 * 2.0**-18]
    r = representable_fp32(torch.tensor([0, 2**24 - 1, 2**24 + 1, 3 * 2**40, -(2**25 + 2)]), PRODUCT_SHIFT)
    assert r.tolist() == [True, True, False, True, False]
    with pytest.raises(OperandError, match="shift"):
        fixed_to_fp32(num, 200)


# --- accumulator emulation and its bound ---------------------------------------------------------------------------


def discriminating_row(k: int, small: float) -> torch.Tensor:
    """[1, k]: 16 then k - 1 copies of ``small``; its product with itself is 256 then k - 1 products small**2."""
    return e4m3([[16.0] + [small] * (k - 1)])


def test_issue_discriminating_row():
    # 256 then 4095 products 2**-6: exact 256 + 4095/64 = 319.984375. With 14 bits the spacing at 256 is 2**-5, so
    # 256 + 2**-6 truncates (and, a tie, rounds to even) back to 256 for the rest of the first group of 128; each of
    # the other 31 groups sums exactly to 128 * 2**-6 = 2; the float32 total is 256 + 31 * 2 = 318.
    a = discriminating_row(4096, 0.125)
    assert exact_sum_fp32(a, a).item() == 319.984375
    assert emulate_accumulation(a, a, "exact").item() == 319.984375
    assert emulate_accumulation(a, a, "fp32").item() == 319.984375  # float32 spacing at 256 is 2**-15
    assert emulate_accumulation(a, a, "fp32 bits=14 truncate promote=128").item() == 318.0
    assert emulate_accumulation(a, a, "fp32 bits=14 rne promote=128").item() == 318.0
    assert emulate_accumulation(a, a, "fp32 bits=14 truncate").item() == 256.0
    # the bound (accumulation_bound docstring), u = 2**-13, N = 128, K = 4096, sum |p| = 319.984375:
    #   c(129, u) = 128 * 2**-13 * (1 + 2**-13)**127 = 0.015625 * 1.0156257.. = 0.01586910..
    #   c(4096, 2**-24) * (1 + u)**128 = 4095 * 2**-24 * 1.00024407.. * 1.0157497.. = 0.00024798..
    #   (0.01586910 + 0.00024798) * 319.984375 = 5.1572171..; the observed error is 127/64 = 1.984375
    bound = accumulation_bound(a, a, "fp32 bits=14 truncate promote=128")
    assert bound.dtype == torch.float64 and bound.item() == pytest.approx(5.1572172, abs=1e-6)
    assert accumulation_bound(a, a, "exact").item() == 0.0


def test_rne_and_truncation_differ():
    # 256 then 127 products 3 * 2**-7 = 0.75 * 2**-5 (the 14-bit spacing at 256): truncation never moves off 256,
    # RNE adds one spacing per product: 256 + 127/32 = 259.96875; exact 256 + 381/128 = 258.9765625.
    a = discriminating_row(128, 0.1875)
    b = discriminating_row(128, 0.125)
    assert exact_sum_fp32(a, b).item() == 258.9765625
    assert emulate_accumulation(a, b, "fp32 bits=14 truncate promote=128").item() == 256.0
    assert emulate_accumulation(a, b, "fp32 bits=14 rne promote=128").item() == 259.96875


def test_fp32_models_are_float32_arithmetic():
    g = torch.Generator().manual_seed(11)
    a = (torch.randn(3, 700, generator=g) * 4).to(E4M3)
    b = (torch.randn(2, 700, generator=g) * 0.05).to(E4M3)
    p = (a.float()[:, None, :] * b.float()[None, :, :]).numpy()  # exact in float32 (<= 8 significant bits)
    seq = np.zeros((3, 2), np.float32)
    for j in range(700):
        seq = seq + p[:, :, j]
    assert np.array_equal(emulate_accumulation(a, b, "fp32").numpy(), seq)
    total = np.zeros((3, 2), np.float32)
    for c in range(0, 700, 64):
        part = np.zeros((3, 2), np.float32)
        for j in range(c, min(c + 64, 700)):
            part = part + p[:, :, j]
        total = total + part
    assert np.array_equal(emulate_accumulation(a, b.t().contiguous().t(), "fp32 promote=64").numpy(), total)
    with pytest.raises(ContractError, match="order"):
        emulate_accumulation(a, b, "fp32", order="pairwise")


MODELS = [
    "fp32",
    "fp32 promote=16",
    "fp32 bits=14 truncate promote=128",
    "fp32 bits=14 rne promote=32",
    "fp32 bits=8 truncate",
    "fp32 bits=5 rne promote=7",
    "fp32 bits=3 truncate promote=4",
]


@settings(max_examples=60, deadline=None)
@given(data=st.data(), m=st.integers(1, 3), n=st.integers(1, 3), k=st.integers(1, 300), model=st.sampled_from(MODELS))
def test_emulation_never_exceeds_the_bound(data, m, n, k, model):
    span = data.draw(st.sampled_from([FINITE_BYTES, [b for b in FINITE_BYTES if 0x30 <= b & 0x7F <= 0x48]]))
    idx = data.draw(st.lists(st.integers(0, len(span) - 1), min_size=(m + n) * k, max_size=(m + n) * k))
    t = torch.tensor([span[i] for i in idx], dtype=torch.uint8).view(E4M3)
    a, b = t[: m * k].reshape(m, k), t[m * k :].reshape(n, k)
    exact = exact_fp8_mm(a, b)
    got = emulate_accumulation(a, b, model)
    # every result is a multiple of 2**-18 below 2**35: the error in units is an exact integer
    err = ((got.double() * 2**PRODUCT_SHIFT).to(torch.int64) - exact).abs().double() * 2.0**-PRODUCT_SHIFT
    assert bool((err <= accumulation_bound(a, b, model)).all())


@settings(max_examples=60, deadline=None)
@given(data=st.data(), m=st.integers(1, 3), n=st.integers(1, 3), k=st.integers(1, 200), model=st.sampled_from(MODELS))
def test_emulation_equals_the_integer_emulator(data, m, n, k, model):
    # tests/helpers/fp8_kernels.py rounds int64 units by shifts (no float64 encoding): an independent implementation
    idx = data.draw(st.lists(st.integers(0, len(FINITE_BYTES) - 1), min_size=(m + n) * k, max_size=(m + n) * k))
    t = torch.tensor([FINITE_BYTES[i] for i in idx], dtype=torch.uint8).view(E4M3)
    a, b = t[: m * k].reshape(m, k), t[m * k :].reshape(n, k)
    assert torch.equal(emulate_accumulation(a, b, model), emulated_accumulator(a, b, model))


def test_emulation_limits():
    with pytest.raises(OperandError, match="exceeds"):
        emulate_accumulation(torch.zeros(1, 2**17 + 1, dtype=E4M3), torch.zeros(1, 2**17 + 1, dtype=E4M3), "fp32")
    with pytest.raises(ContractError):
        accumulation_bound(e4m3([[1.0]]), e4m3([[1.0]]), "fp64")


# --- the e4m3 cast the quantizers rely on ---------------------------------------------------------------------------


def nearest_e4m3_bytes(v: np.ndarray) -> np.ndarray:
    """Independent RNE to e4m3 of float64 values in [-448, 448]: nearest finite value, ties to the even byte."""
    pos = sorted((decode(b), b) for b in FINITE_BYTES if b < 0x80)
    vals = np.array([p[0] for p in pos])
    codes = np.array([p[1] for p in pos])
    mag = np.abs(v)
    hi = np.clip(np.searchsorted(vals, mag), 1, len(vals) - 1)
    lo = hi - 1
    dlo, dhi = mag - vals[lo], vals[hi] - mag
    take_hi = (dhi < dlo) | ((dhi == dlo) & (codes[hi] % 2 == 0))
    out = np.where(take_hi, codes[hi], codes[lo])
    return np.where(np.signbit(v), out | 0x80, out)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_torch_e4m3_cast_is_rne_for_every_16bit_value(dtype):
    x = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(dtype)
    x = x[torch.isfinite(x) & (x.abs() <= 448)]
    assert np.array_equal(np.array(u8(x.to(E4M3))), nearest_e4m3_bytes(x.double().numpy()))


def test_torch_e4m3_cast_is_rne_near_every_float32_boundary():
    vals = sorted(decode(b) for b in FINITE_BYTES if b < 0x80)
    points = []
    for lo, hi in zip(vals, vals[1:]):
        for c in (lo, (lo + hi) / 2, hi):  # exact in float32 (<= 5 significant bits)
            f = np.float32(c)
            points += [np.nextafter(np.nextafter(f, -1), -1), np.nextafter(f, -1), f, np.nextafter(f, 1000)]
    v = np.array(points, dtype=np.float32)
    v = np.concatenate([v, -v])
    v = v[np.abs(v) <= 448]
    assert len(v) > 1400
    assert np.array_equal(np.array(u8(torch.from_numpy(v).to(E4M3))), nearest_e4m3_bytes(v.astype(np.float64)))
    big = torch.tensor([448.5, 463.99, 1e30, -500.0, float("nan")])
    assert u8(to_e4m3_saturated(big)) == [0x7E, 0x7E, 0x7E, 0xFE, 0x7E]


# --- quantizers ------------------------------------------------------------------------------------------------------


def test_weight_hand_case():
    w = torch.tensor([[448.0, -0.0, -1e-6, 3.5], [0.0, 0.0, -0.0, 0.0], [-2.0, 1.0, 0.5, 0.0]], dtype=torch.bfloat16)
    q, s = quantize_weight_fp8_per_channel(w)
    # row 0: scale 448/448 = 1; -0.0 + 0 (the zero point) = +0 -> 0x00; -1e-6 underflows to -0 -> 0x80; 3.5 exact
    # row 1: all zero -> scale finfo(bf16).eps = 2**-7, q = +0; row 2: scale bf16(2/448) = bf16(0.0044642..)
    #   = 0.00445556640625 (0x3B92); 1/scale = 224.43.. -> bf16 224 -> e4m3 224; 0.5/scale = 112.2.. -> bf16 112.
    assert s.dtype == torch.bfloat16 and s.shape == (3, 1)
    assert s.view(torch.int16).flatten().tolist() == [0x3F80, 0x3C00, 0x3B92]
    assert u8(q[0]) == [0x7E, 0x00, 0x80, 0x46] and u8(q[1]) == [0, 0, 0, 0]
    assert q[2].float().tolist() == [-448.0, 224.0, 112.0, 0.0]
    with pytest.raises(OperandError, match="non-finite"):
        quantize_weight_fp8_per_channel(torch.tensor([[1.0, float("inf")]]))
    with pytest.raises(OperandError, match="division"):
        quantize_weight_fp8_per_channel(w, division="float64")


@pytest.fixture(scope="module")
def default_linear_weights():
    from reference.model.artifacts import default_parent_dir, load_parent
    from reference.model.checkpoint import linear_names

    config, state, _ = load_parent(default_parent_dir())
    return [state[f"{name}.weight"] for name in linear_names(config)]


def test_weights_byte_identical_to_compressed_tensors(default_linear_weights):
    ct = pytest.importorskip("compressed_tensors")
    from compressed_tensors.quantization import QuantizationArgs
    from compressed_tensors.quantization.lifecycle.forward import quantize
    from compressed_tensors.quantization.utils import calculate_qparams

    args = QuantizationArgs(num_bits=8, type="float", strategy="channel", symmetric=True, dynamic=False)
    elements = mismatches = 0
    for w in default_linear_weights + [torch.tensor([[0.0, -0.0], [-1e-6, 2.0]], dtype=torch.bfloat16)]:
        s, zp = calculate_qparams(torch.amin(w, dim=1, keepdim=True), torch.amax(w, dim=1, keepdim=True), args)
        q = quantize(w, s, zp, args, dtype=torch.float8_e4m3fn)
        rq, rs = quantize_weight_fp8_per_channel(w)
        assert torch.equal(s.view(torch.int16), rs.view(torch.int16)), ct.__version__
        elements += q.numel()
        mismatches += int((q.view(torch.uint8) != rq.view(torch.uint8)).sum())
    assert (elements, mismatches) == (8650752 + 4, 0)


def test_activation_per_token_divides_by_the_scale():
    # bf16 0x410A = 8.625, 0x40CF = 6.46875: scale = fl32(8.625 / 448) = 0.019252232..; 6.46875 / scale = 336.0 in
    # float32, a tie between e4m3 320 (even) and 352 -> 320; the reciprocal route gives 336.00003 -> 352.
    x = torch.tensor([[0x410A, 0x40CF]], dtype=torch.int16).view(torch.bfloat16)
    q, s = quantize_activation_fp8_per_token(x)
    assert s.dtype == torch.float32 and s.shape == (1,) and s.item() == float(np.float32(8.625) / np.float32(448))
    assert q.float().tolist() == [[448.0, 320.0]]
    assert quantize_activation_fp8_per_token(x, rule="native")[0].float().tolist() == [[448.0, 352.0]]
    z, zs = quantize_activation_fp8_per_token(torch.zeros(2, 3))
    assert u8(z) == [0] * 6 and zs.tolist() == [MIN_SCALING_FACTOR] * 2
    assert MIN_SCALING_FACTOR == float(np.float32(1 / 229376))


def test_activation_per_tensor():
    x = torch.tensor([[1.0, -448.0], [0.1, 2**-20]])
    q, s = quantize_activation_fp8_per_tensor(x)
    assert s.shape == (1,) and s.item() == 1.0 and q.float().tolist() == [[1.0, -448.0], [0.1015625, 0.0]]
    z, zs = quantize_activation_fp8_per_tensor(torch.zeros(1, 2))
    assert zs.tolist() == [0.0] and z.float().tolist() == [[448.0, 448.0]]  # 0 * (1/0) = NaN; fminf(NaN, 448) = 448
    nz, nzs = quantize_activation_fp8_per_tensor(torch.zeros(1, 2), rule="native")
    assert nzs.tolist() == [MIN_SCALING_FACTOR] and u8(nz) == [0, 0]
    with pytest.raises(OperandError, match="rule"):
        quantize_activation_fp8_per_tensor(x, rule="cuda")


def test_float32_activations_match_torchao_rowwise():
    """torchao's Float8Tensor PerRow (torch path): scale = absmax / 448 in the input dtype, q = e4m3(clamp(x / scale)):
    the vLLM kernel's arithmetic for float32 rows whose scale is above the floor."""
    pytest.importorskip("torchao")
    from torchao.quantization import Float8Tensor, PerRow

    from reference.model.capture import default_capture_set

    cs = default_capture_set()
    if cs is None:
        pytest.skip("default captures not built")
    elements = mismatches = 0
    for name in cs.layer_names():
        x = cs.load_layer(name)["x"].float()
        t = Float8Tensor.from_hp(x, granularity=PerRow())
        q, s = quantize_activation_fp8_per_token(x)
        assert torch.equal(t.scale.reshape(-1), s)
        elements += q.numel()
        mismatches += int((t.qdata.view(torch.uint8) != q.view(torch.uint8)).sum())
    assert (elements, mismatches) == (983040, 0)  # 28 layers x 64 tokens x K


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():
    g = torch.Generator().manual_seed(3)
    x = (torch.randn(16, 512, generator=g) * 3).to(torch.bfloat16)
    w = (torch.randn(24, 512, generator=g) * 0.02).to(torch.bfloat16)
    for fn in (quantize_activation_fp8_per_token, quantize_activation_fp8_per_tensor, quantize_weight_fp8_per_channel):
        (qc, sc), (qg, sg) = fn(x), fn(x.cuda())
        assert u8(qc) == u8(qg.cpu()) and torch.equal(sc, sg.cpu())
    a, _ = quantize_activation_fp8_per_token(x)
    b, _ = quantize_weight_fp8_per_channel(w)
    assert torch.equal(exact_fp8_mm(a.cuda(), b.cuda().t().contiguous().t()).cpu(), exact_fp8_mm(a, b))
    assert torch.equal(exact_sum_fp32(a.cuda(), b.cuda()).cpu(), exact_sum_fp32(a, b))
    model = "fp32 bits=14 truncate promote=128"
    assert torch.equal(emulate_accumulation(a.cuda(), b.cuda(), model).cpu(), emulate_accumulation(a, b, model))
    assert torch.equal(accumulation_bound(a.cuda(), b.cuda(), model).cpu(), accumulation_bound(a, b, model))


def test_check_e4m3_reads_no_value_while_a_cuda_graph_is_captured(monkeypatch):
    """Counting NaNs synchronizes: inside a CUDA-graph capture the value check is skipped (``reference.validate``'s
    rule), so an e4m3 kernel validating its operands still captures (``triton-block-fp8`` failed C13 natively)."""
    import reference.fp8.exact as ex

    nan = torch.full((2, 2), float("nan")).to(torch.float8_e4m3fn)
    with pytest.raises(OperandError, match="4 NaN"):
        ex.check_e4m3(nan, "a", "M,K")
    monkeypatch.setattr(ex, "capturing", lambda t: True)
    ex.check_e4m3(nan, "a", "M,K")  # not read
    with pytest.raises(OperandError, match="dtype"):  # metadata is still checked
        ex.check_e4m3(nan.to(torch.float32), "a", "M,K")
