/*
 * The canonical-form check of a CSR adjacency in one linear pass (pyg_private.utils.adjacency.
 * simple_undirected_csr): every column index in [0, n), every row strictly increasing (sorted, no
 * duplicate), no self-loop, and the matrix equal to its transpose.
 *
 * Symmetry without a sort: reading the rows in order, the entries (i, j) reach row j's transpose in
 * increasing i, so the transpose's rows come out sorted. A cursor per row walks the stored row j:
 * each (i, j) read must find i at row j's cursor, which then advances; at the end every cursor must
 * stand at the end of its row. Both hold exactly when A^T = A (the transpose's sorted row j is then
 * row j itself, entry by entry). Memory: the n cursors; time: one pass over the entries, whose
 * cursor reads are random.
 *
 * Optional, like the other C modules of the package: without it the same answer comes from torch
 * operations in row blocks. The Python wrapper checks the dtypes (int32 or int64), contiguity,
 * crow[0] = 0, crow[n] = nnz and nondecreasing crow before calling.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>

#define CHECK(NAME, RT, CT)                                                                                   \
    static int NAME(const RT *crow, const CT *col, int64_t n, int64_t *cursor) {                              \
        for (int64_t j = 0; j < n; j++)                                                                       \
            cursor[j] = (int64_t)crow[j];                                                                     \
        for (int64_t i = 0; i < n; i++) {                                                                     \
            const int64_t a = (int64_t)crow[i], b = (int64_t)crow[i + 1];                                     \
            int64_t previous = -1;                                                                            \
            for (int64_t e = a; e < b; e++) {                                                                 \
                const int64_t j = (int64_t)col[e];                                                            \
                if (j <= previous || j >= n || j == i) /* unsorted, duplicate, self-loop, out of range */    \
                    return 0;                                                                                 \
                previous = j;                                                                                 \
                const int64_t c = cursor[j];                                                                  \
                if (c >= (int64_t)crow[j + 1] || (int64_t)col[c] != i) /* (j, i) missing at its place */      \
                    return 0;                                                                                 \
                cursor[j] = c + 1;                                                                            \
            }                                                                                                 \
        }                                                                                                     \
        for (int64_t j = 0; j < n; j++)                                                                       \
            if (cursor[j] != (int64_t)crow[j + 1])                                                            \
                return 0;                                                                                     \
        return 1;                                                                                             \
    }
CHECK(check_64_64, int64_t, int64_t)
CHECK(check_64_32, int64_t, int32_t)
CHECK(check_32_64, int32_t, int64_t)
CHECK(check_32_32, int32_t, int32_t)

static PyObject *simple_symmetric(PyObject *self, PyObject *args) {
    unsigned long long crow, col;
    long long n;
    int crow_bits, col_bits;
    if (!PyArg_ParseTuple(args, "KKLii", &crow, &col, &n, &crow_bits, &col_bits))
        return NULL;
    if (n < 0 || (crow_bits != 32 && crow_bits != 64) || (col_bits != 32 && col_bits != 64)) {
        PyErr_SetString(PyExc_ValueError, "simple_symmetric: bad size or index width");
        return NULL;
    }
    int64_t *cursor = (int64_t *)malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
    if (cursor == NULL)
        return PyErr_NoMemory();
    int ok;
    const void *r = (const void *)(uintptr_t)crow, *c = (const void *)(uintptr_t)col;
    Py_BEGIN_ALLOW_THREADS
    if (crow_bits == 64)
        ok = col_bits == 64 ? check_64_64(r, c, n, cursor) : check_64_32(r, c, n, cursor);
    else
        ok = col_bits == 64 ? check_32_64(r, c, n, cursor) : check_32_32(r, c, n, cursor);
    Py_END_ALLOW_THREADS
    free(cursor);
    return PyBool_FromLong(ok);
}

static PyMethodDef methods[] = {
    {"simple_symmetric", simple_symmetric, METH_VARARGS,
     "simple_symmetric(crow, col, n, crow_bits, col_bits) -> whether the CSR arrays (addresses of contiguous int32 "
     "or int64 CPU buffers) have every column in [0, n), strictly increasing rows, no self-loop and a symmetric "
     "pattern"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_graph_check_native",
                                    "Linear-time canonical-form check of a CSR adjacency (optional).", -1, methods};

PyMODINIT_FUNC PyInit__graph_check_native(void) { return PyModule_Create(&module); }
