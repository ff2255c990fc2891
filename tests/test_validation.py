"""numbasparse.validation: corrupted sparse structure is refused with a message naming the argument
and the first offending position, before scipy (or a kernel) reads out of bounds; inputs unchanged."""
import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from numbasparse.validation import check_csr_arrays, check_sparse

FORMATS = ("csr", "csc", "coo", "bsr", "dia", "lil", "dok")
DENSE = np.array([[1.0, 0, 2, 0], [0, 3, 0, 4]])  # indptr [0 2 4], indices [0 2 1 3]


def csr(cls=sp.csr_matrix):
    return cls(DENSE)


def snapshot(A):
    """Bytes, dtype and identity of every array (and list) that holds A's structure."""
    out = {"shape": A.shape}
    for attr in ("indptr", "indices", "data", "row", "col", "offsets", "rows"):
        a = getattr(A, attr, None)
        if isinstance(a, np.ndarray):
            out[attr] = (id(a), a.dtype.str, a.shape, repr(a.tolist()) if a.dtype == object else a.tobytes())
    if A.format == "dok":
        out["items"] = sorted(A.items())
    return out


def refused(A, exc, *fragments, name="adj"):
    """check_sparse(A, name) raises exactly ``exc`` with every fragment in its message; A unchanged."""
    before = snapshot(A)
    with pytest.raises(exc) as info:
        check_sparse(A, name)
    assert type(info.value) is exc
    message = str(info.value)
    assert message.startswith(name) or f" {name}" in message or f"{name}." in message, message
    for fragment in fragments:
        assert fragment in message, (fragment, message)
    assert snapshot(A) == before
    return message


def accepted(A):
    before = snapshot(A)
    out = check_sparse(A, "adj")
    assert snapshot(A) == before
    return out


# ---- CSR: index out of range -------------------------------------------------------------------

@pytest.mark.parametrize("value", [4, -1, 10**7, -10**7])
def test_column_index_out_of_range_names_entry_row_and_column_count(value):
    A = csr()
    A.indices[2] = value
    refused(A, ValueError, f"adj.indices[2] = {value} (row 1) is out of range for 4 columns")


def test_first_offending_index_is_reported():
    A = csr()
    A.indices[1] = -1
    A.indices[3] = 10**7
    refused(A, ValueError, "adj.indices[1] = -1 (row 0)")


def test_out_of_range_index_after_empty_rows_names_its_own_row():
    A = sp.csr_matrix((np.ones(2), np.array([0, 9], np.int32), np.array([0, 1, 1, 1, 2], np.int32)),
                      shape=(4, 4))
    A.indices[1] = 9
    refused(A, ValueError, "adj.indices[1] = 9 (row 3)")


def test_index_equal_to_ncols_in_a_matrix_with_zero_columns():
    A = sp.csr_matrix((3, 0))
    A.indices = np.array([0], np.int32)
    A.data = np.ones(1)
    A.indptr = np.array([0, 0, 1, 1], np.int32)
    refused(A, ValueError, "adj.indices[0] = 0 (row 1) is out of range for 0 columns")


def test_uint64_index_beyond_int64_is_named():
    A = csr()
    A.indices = A.indices.astype(np.uint64)
    A.indices[0] = 2**63 + 5
    refused(A, ValueError, f"adj.indices[0] = {2**63 + 5} (row 0)")


# ---- CSR: indptr --------------------------------------------------------------------------------

def test_indptr_not_starting_at_zero():
    A = csr()
    A.indptr[0] = 1
    refused(A, ValueError, "adj.indptr[0] must be 0, got 1")


def test_non_monotone_indptr_names_the_first_decrease_and_its_row():
    A = sp.csr_matrix(np.eye(5))
    A.indptr[3] = 7  # [0 1 2 7 4 5]
    refused(A, ValueError, "adj.indptr is not non-decreasing: indptr[3] = 7 > indptr[4] = 4 (row 3)")


def test_non_monotone_indptr_with_zero_last_entry_is_refused():
    # scipy's own check_format(full_check=True) passes this one (it skips its checks when nnz == 0)
    A = csr()
    A.indptr[:] = [0, 1, 0]
    refused(A, ValueError, "indptr[1] = 1 > indptr[2] = 0 (row 1)")


def test_indptr_last_beyond_indices_length():
    A = csr()
    A.indptr[2] = 5
    refused(A, ValueError, "adj.indptr[2] = 5", "len(adj.indices) = 4")


def test_indptr_last_below_indices_length_is_accepted_and_trailing_entries_ignored():
    # scipy's semantics: entries past indptr[-1] are pruned, never read
    A = csr()
    A.indptr[2] = 3
    A.indices[3] = 10**7
    assert accepted(A) is A
    assert check_sparse(A).nnz == 3


@pytest.mark.parametrize("indptr", [[0, 2], [0, 2, 4, 4], []])
def test_wrong_indptr_length(indptr):
    A = csr()
    A.indptr = np.array(indptr, np.int32)
    refused(A, ValueError, f"adj.indptr has length {len(indptr)}, expected 3 (2 rows + 1)")


def test_indptr_2d_is_refused():
    A = csr()
    A.indptr = A.indptr.reshape(1, 3)
    refused(A, ValueError, "adj.indptr must be 1-D")


# ---- index dtypes -------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [">i4", ">i8", ">u2", ">u8"])
def test_big_endian_indices_valid_are_accepted(dtype):
    A = csr()
    A.indices = A.indices.astype(dtype)
    A.indptr = A.indptr.astype(dtype)
    assert accepted(A) is A
    assert A.indices.dtype.str == np.dtype(dtype).str  # not swapped in place


@pytest.mark.parametrize("dtype", [">i4", ">i8"])
@pytest.mark.parametrize("value", [4, -1, 10**7])
def test_big_endian_indices_out_of_range_are_named(dtype, value):
    A = csr()
    A.indices = A.indices.astype(dtype)
    A.indices[3] = value
    refused(A, ValueError, f"adj.indices[3] = {value} (row 1) is out of range for 4 columns")


def test_big_endian_non_monotone_indptr_is_named():
    A = csr()
    A.indptr = np.array([0, 3, 2], ">i8")
    refused(A, ValueError, "indptr[1] = 3 > indptr[2] = 2 (row 1)")


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16, np.uint32, np.uint64])
def test_unsigned_indices(dtype):
    A = csr()
    A.indices = A.indices.astype(dtype)
    A.indptr = A.indptr.astype(dtype)
    assert accepted(A) is A
    A.indices[2] = np.iinfo(dtype).max  # what -1 wraps to
    refused(A, ValueError, f"adj.indices[2] = {np.iinfo(dtype).max} (row 1)")


def test_unsigned_non_monotone_indptr_is_not_masked_by_wraparound():
    A = csr()
    A.indptr = np.array([0, 3, 2], np.uint32)
    refused(A, ValueError, "indptr[1] = 3 > indptr[2] = 2 (row 1)")


def test_int8_indices():
    A = sp.csr_matrix(np.ones((2, 200)))
    A.indices = A.indices.astype(np.int16)
    assert accepted(A) is A
    B = csr()
    B.indices = B.indices.astype(np.int8)
    B.indptr = B.indptr.astype(np.int8)
    assert accepted(B) is B
    B.indices[0] = -128
    refused(B, ValueError, "adj.indices[0] = -128 (row 0)")


def test_int8_negative_index_in_a_wide_matrix_is_caught():
    # -100 viewed as uint8 is 156 < 200: the range check must not rely on the unsigned view here
    A = sp.csr_matrix((np.ones(1), np.array([5], np.int8), np.array([0, 1], np.int8)), shape=(1, 200))
    A.indices = np.array([-100], np.int8)
    A.indptr = np.array([0, 1], np.int8)
    refused(A, ValueError, "adj.indices[0] = -100 (row 0) is out of range for 200 columns")


@pytest.mark.parametrize("attr", ["indices", "indptr"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, bool, object])
def test_non_integer_index_arrays_are_a_type_error(attr, dtype):
    A = csr()
    setattr(A, attr, getattr(A, attr).astype(dtype))
    refused(A, TypeError, f"adj.{attr} must have an integer dtype")


def test_index_array_that_is_a_list_is_a_type_error():
    A = csr()
    A.indices = [0, 2, 1, 3]
    refused(A, TypeError, "adj.indices must be a 1-D integer NumPy array")


# ---- values -------------------------------------------------------------------------------------

def test_complex_values_are_a_type_error():
    A = csr()
    A.data = A.data.astype(np.complex128)
    refused(A, TypeError, "adj.data must have a real numeric dtype, got complex128")


def test_data_length_must_match_indices():
    A = csr()
    A.data = A.data[:3]
    refused(A, ValueError, "adj.data has length 3, expected 4")


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.uint8, bool, ">f8"])
def test_real_value_dtypes_are_accepted(dtype):
    A = csr()
    A.data = A.data.astype(dtype)
    assert accepted(A) is A


# ---- dimensions and non-sparse input ------------------------------------------------------------

def test_1d_sparse_array_is_refused():
    refused(sp.csr_array(np.ones(3)), ValueError, "adj must be 2-D, got 1-D")


def test_3d_coo_array_is_refused():
    refused(sp.coo_array(np.ones((2, 2, 2))), ValueError, "adj must be 2-D, got 3-D")


@pytest.mark.parametrize("value", [np.ones((2, 2)), [[1.0]], None])
def test_non_sparse_input_is_a_type_error(value):
    with pytest.raises(TypeError, match="adj must be a scipy.sparse matrix or array"):
        check_sparse(value, "adj")


# ---- other formats ------------------------------------------------------------------------------

@pytest.mark.parametrize("cls", [sp.coo_matrix, sp.coo_array])
@pytest.mark.parametrize("value", [2, -1, 10**7, -10**7])
def test_coo_row_out_of_range(cls, value):
    A = cls(DENSE)
    A.row[3] = value
    refused(A, ValueError, f"adj.row[3] = {value} is out of range for 2 rows")


@pytest.mark.parametrize("cls", [sp.coo_matrix, sp.coo_array])
@pytest.mark.parametrize("value", [4, -1, 10**7, -10**7])
def test_coo_col_out_of_range(cls, value):
    A = cls(DENSE)
    A.col[1] = value
    refused(A, ValueError, f"adj.col[1] = {value} (row 0) is out of range for 4 columns")


def test_coo_first_offender_by_position_across_row_and_col():
    A = sp.coo_matrix(DENSE)
    A.col[1] = 9
    A.row[2] = 9
    refused(A, ValueError, "adj.col[1] = 9")


def test_coo_lengths_must_agree():
    A = sp.coo_matrix(DENSE)
    A.col = A.col[:3]
    refused(A, ValueError, "adj.col has length 3, expected 4")
    B = sp.coo_matrix(DENSE)
    B.data = B.data[:2]
    refused(B, ValueError, "adj.data has length 2, expected 4")


@pytest.mark.parametrize("cls", [sp.csc_matrix, sp.csc_array])
def test_csc_corrupted(cls):
    A = cls(DENSE)  # indptr [0 1 2 3 4], row indices [0 1 0 1]
    A.indices[1] = 2
    refused(A, ValueError, "adj.indices[1] = 2 (column 1) is out of range for 2 rows")
    B = cls(DENSE)
    B.indptr[2] = 9
    refused(B, ValueError, "indptr[2] = 9 > indptr[3] = 3 (column 2)")
    C = cls(DENSE)
    C.indptr = C.indptr[:3]
    refused(C, ValueError, "adj.indptr has length 3, expected 5 (4 columns + 1)")


@pytest.mark.parametrize("cls", [sp.bsr_matrix, sp.bsr_array])
def test_bsr_corrupted(cls):
    A = cls(DENSE, blocksize=(1, 2))  # 2 block rows, 2 block columns
    A.indices[0] = 2
    refused(A, ValueError, "adj.indices[0] = 2 (block row 0) is out of range for 2 block columns")
    B = cls(DENSE, blocksize=(1, 2))
    B.indptr[1] = 5
    refused(B, ValueError, "indptr[1] = 5 > indptr[2]", "(block row 1)")
    C = cls(DENSE, blocksize=(1, 2))
    C.data = np.ones((4, 1, 3))
    refused(C, ValueError, "adj.shape (2, 4) is not a multiple of its blocksize (1, 3)")


@pytest.mark.parametrize("cls", [sp.lil_matrix, sp.lil_array])
def test_lil_corrupted(cls):
    A = cls(DENSE)
    A.rows[1][0] = 10**7
    refused(A, ValueError, "adj (lil format)", "indices[2] = 10000000 (row 1) is out of range for 4 columns")
    B = cls(DENSE)
    B.data[0] = [1.0] * 5  # scipy's tocsr writes past its buffer here
    refused(B, ValueError, "adj.rows[0] has 2 entries but adj.data[0] has 5")
    C = cls(DENSE)
    C.rows = C.rows[:1]
    refused(C, ValueError, "adj.rows must be a 1-D object array of 2 lists")


@pytest.mark.parametrize("cls", [sp.dia_matrix, sp.dia_array])
def test_dia_corrupted(cls):
    A = cls(DENSE)
    A.offsets = A.offsets[:1]  # scipy's dia_tocsr reads past offsets here
    refused(A, ValueError, "adj.data has 2 diagonals but adj.offsets has 1")
    B = cls(DENSE)
    B.offsets[:] = 0
    refused(B, ValueError, "adj.offsets has duplicate values")


@pytest.mark.parametrize("cls", [sp.dok_matrix, sp.dok_array])
def test_dok_out_of_range_key_is_a_value_error_naming_the_argument(cls):
    A = cls(DENSE)
    A._dict[(0, 10**7)] = 5.0  # bypasses dok's own key check
    refused(A, ValueError, "adj (dok format) could not be converted to CSR")


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("cls", [sp.csr_matrix, sp.csr_array])
def test_valid_matrices_of_every_format_are_accepted(fmt, cls):
    A = cls(DENSE).asformat(fmt)
    out = accepted(A)
    if fmt in ("csr", "csc", "coo", "bsr"):
        assert out is A
    else:
        assert out.format == "csr" and isinstance(out, type(cls(DENSE)))
    np.testing.assert_array_equal(out.toarray(), DENSE)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("shape", [(0, 0), (0, 5), (5, 0), (3, 3)])
def test_empty_and_zero_nnz_matrices_are_accepted(fmt, shape):
    for cls in (sp.csr_matrix, sp.csr_array):
        A = cls(shape).asformat(fmt)
        assert accepted(A).nnz == 0


def test_check_sparse_name_defaults_to_A():
    A = csr()
    A.indptr[0] = 1
    with pytest.raises(ValueError, match=r"^A\.indptr\[0\] must be 0, got 1$"):
        check_sparse(A)


# ---- check_csr_arrays ---------------------------------------------------------------------------

def test_check_csr_arrays_on_raw_arrays():
    indptr, indices = np.array([0, 2, 4]), np.array([0, 2, 1, 3])
    assert check_csr_arrays(indptr, indices, (2, 4)) is None
    with pytest.raises(ValueError, match=r"^X\.indices\[3\] = 3 \(row 1\) is out of range for 3 columns$"):
        check_csr_arrays(indptr, indices, (2, 3), "X")
    with pytest.raises(ValueError, match="X.data has length 3, expected 4"):
        check_csr_arrays(indptr, indices, (2, 4), "X", data=np.ones(3))


@pytest.mark.parametrize("shape", [(2, -4), (2,), (2, 4, 1), (2.0, 4), (True, 4)])
def test_check_csr_arrays_refuses_bad_shapes(shape):
    with pytest.raises(ValueError, match="X"):
        check_csr_arrays(np.array([0, 2, 4]), np.array([0, 2, 1, 3]), shape, "X")


# ---- fuzz: against an obviously-correct slow checker ----------------------------------------------

INDEX_DTYPES = ["i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", ">i4", ">i8", ">u2"]


def slow_check(indptr, indices, data, major, minor, kind="compressed"):
    """None if valid, else (exception class, fragment the message must contain)."""
    if data.dtype.kind not in "biuf":
        return TypeError, "data must have a real numeric dtype"
    ip, ix = [int(v) for v in indptr], [int(v) for v in indices]
    if kind == "coo":  # indptr holds the row coordinates here
        if len(ip) != len(ix):
            return ValueError, "col has length"
        if len(data) != len(ix):
            return ValueError, "data has length"
        for k, (r, c) in enumerate(zip(ip, ix)):
            if not 0 <= r < major:
                return ValueError, f"row[{k}] = {r} is out of range"
            if not 0 <= c < minor:
                return ValueError, f"col[{k}] = {c} (row {r}) is out of range"
        return None
    if len(ip) != major + 1:
        return ValueError, "indptr has length"
    if ip[0] != 0:
        return ValueError, f"indptr[0] must be 0, got {ip[0]}"
    for i in range(major):
        if ip[i + 1] < ip[i]:
            return ValueError, f"indptr[{i}] = {ip[i]} > indptr[{i + 1}] = {ip[i + 1]}"
    if ip[-1] > len(ix):
        return ValueError, f"indptr[{major}] = {ip[-1]}"
    if len(data) != len(ix):
        return ValueError, "data has length"
    for k in range(ip[-1]):
        if not 0 <= ix[k] < minor:
            return ValueError, f"indices[{k}] = {ix[k]} ("  # the row is checked by the caller
    return None


def dense_of(indptr, indices, data, major, minor):
    out = np.zeros((major, minor))
    for i in range(major):
        for k in range(int(indptr[i]), int(indptr[i + 1])):
            out[i, int(indices[k])] += float(data[k])
    return out


@st.composite
def structures(draw):
    fmt = draw(st.sampled_from(["csr", "csr", "csc", "coo"]))
    major = draw(st.integers(0, 5))
    minor = draw(st.integers(0, 5) | st.sampled_from([127, 128, 129, 200, 255, 256, 257, 40000]))  # int8/16 edges
    lengths = draw(st.lists(st.integers(0, 3), min_size=major, max_size=major)) if minor else [0] * major
    indptr = [0]
    for n in lengths:
        indptr.append(indptr[-1] + n)
    nnz = indptr[-1]
    indices = draw(st.lists(st.integers(0, max(minor - 1, 0)), min_size=nnz, max_size=nnz))
    trailing = draw(st.lists(st.sampled_from([-1, minor, 10**7]) | st.integers(0, minor), max_size=2))
    trailing = trailing if fmt != "coo" else []
    indices += trailing  # past indptr[-1]: never read, not checked
    if fmt == "coo":
        indptr = [i for i, n in enumerate(lengths) for _ in range(n)]  # row coordinates
    ptr_dtype, idx_dtype = draw(st.sampled_from(INDEX_DTYPES)), draw(st.sampled_from(INDEX_DTYPES))
    indptr, indices = np.array(indptr, np.int64), np.array(indices, np.int64)
    data = np.arange(1, len(indices) + 1, dtype=np.float64)

    mutation = draw(st.sampled_from(["none", "none", "index=minor", "index=-1", "index=huge", "index", "indptr[0]",
                                     "indptr[-1]=len+1", "indptr decreases", "indptr", "length", "data"]))
    if mutation.startswith("index") and len(indices):
        if mutation == "index":
            value = draw(st.integers(-8, minor + 8))
        elif mutation == "index=huge":
            value = draw(st.sampled_from([10**7, -10**7]))
        else:
            value = minor if mutation == "index=minor" else -1
        indices[draw(st.integers(0, len(indices) - 1))] = value
    elif mutation == "indptr[0]" and len(indptr):
        indptr[0] = draw(st.sampled_from([1, -1]))
    elif mutation == "indptr[-1]=len+1" and len(indptr):
        indptr[-1] = len(indices) + 1
    elif mutation == "indptr decreases" and fmt != "coo" and major >= 2:
        i = draw(st.integers(1, major - 1))
        indptr[i] = indptr[i + 1] + draw(st.integers(1, 3))
    elif mutation == "indptr" and len(indptr):
        indptr[draw(st.integers(0, len(indptr) - 1))] = draw(st.integers(-8, len(indices) + 8))
    elif mutation == "length":
        which = draw(st.sampled_from(["indptr", "indices", "data"]))
        arrays = {"indptr": indptr, "indices": indices, "data": data}
        a = arrays[which]
        arrays[which] = a[:-1] if len(a) and draw(st.booleans()) else np.append(a, a[-1:] if len(a) else 0)
        indptr, indices, data = arrays["indptr"], arrays["indices"], arrays["data"].astype(np.float64)
    elif mutation == "data":
        data = data.astype(draw(st.sampled_from([np.complex128, np.float32, np.int8, bool])))
    # wrap into the chosen dtypes as C would; the checker reads the wrapped values back
    indptr = indptr.astype(np.dtype(ptr_dtype).newbyteorder("=")).astype(ptr_dtype)
    indices = indices.astype(np.dtype(idx_dtype).newbyteorder("=")).astype(idx_dtype)
    cls_matrix = draw(st.booleans())
    return fmt, major, minor, indptr, indices, data, cls_matrix


def build(fmt, major, minor, indptr, indices, data, cls_matrix):
    """A scipy matrix holding exactly these arrays (set after construction, as a user could)."""
    if fmt == "coo":
        A = (sp.coo_matrix if cls_matrix else sp.coo_array)((major, minor))
        A.coords = (indptr, indices)
    else:
        shape = (major, minor) if fmt == "csr" else (minor, major)
        A = {"csr": (sp.csr_matrix, sp.csr_array), "csc": (sp.csc_matrix, sp.csc_array)}[fmt][not cls_matrix](shape)
        A.indptr, A.indices = indptr, indices
    A.data = data
    return A


@settings(max_examples=200, deadline=None)
@given(structures())
def test_fuzz_check_sparse_agrees_with_a_slow_checker(case):
    fmt, major, minor, indptr, indices, data, cls_matrix = case
    A = build(*case)
    copies = [(a, a.dtype.str, a.tobytes()) for a in (indptr, indices, data)]
    expected = slow_check(indptr, indices, data, major, minor, "coo" if fmt == "coo" else "compressed")
    try:
        out = check_sparse(A, "M")
    except (ValueError, TypeError) as e:
        assert expected is not None, f"refused a valid {fmt}: {e}"
        assert type(e) is expected[0], (e, expected)
        assert str(e).startswith("M"), e
        assert expected[1] in str(e), (str(e), expected)
        if "indices[" in expected[1]:  # the first offender's row is named too
            k = int(expected[1].split("[")[1].split("]")[0])
            row = int(np.searchsorted(indptr.astype(np.int64), k, side="right")) - 1
            word = "row" if fmt == "csr" else "column"
            assert f"({word} {row})" in str(e), str(e)
    else:
        assert expected is None, f"accepted an invalid {fmt}: {expected}"
        assert out is A
        # accepted means safe for scipy's canonical conversion, and equal to what the arrays say
        canon = sp.csr_matrix(A, dtype=np.float64, copy=True)
        canon.sum_duplicates()
        if fmt == "coo":
            want = np.zeros((major, minor))
            for r, c, v in zip(indptr, indices, data):
                want[int(r), int(c)] += float(v)
        else:
            want = dense_of(indptr, indices, data, major, minor)
            want = want if fmt == "csr" else want.T
        np.testing.assert_array_equal(canon.toarray(), want)
    for a, dtype, raw in copies:
        assert a.dtype.str == dtype and a.tobytes() == raw
    if fmt == "csr" and data.dtype.kind in "biuf":  # the raw-array entry point says the same
        raw_expected = slow_check(indptr, indices, data, major, minor)
        try:
            check_csr_arrays(indptr, indices, (major, minor), "M", data=data)
        except (ValueError, TypeError) as e:
            assert raw_expected is not None and type(e) is raw_expected[0], e
        else:
            assert raw_expected is None
