/*
 * The sum of the neighbours' rows, y[i, :] = sum over p in [crow[i], crow[i+1]) of x[col[p], :], for
 * an adjacency whose stored values are all 1 (float64 rows of C columns, int32 CSR indices). It is
 * the product A x of a 0/1 adjacency, computed as torch's CSR kernel computes it (each entry summed
 * from 0 in the CSR order of the row: the same float64 additions in the same order, so the same
 * result bit for bit; tests compare the two), about twice as fast: each output row is built in
 * AVX2 registers, 16 columns at a time, so the only memory traffic is the neighbours' rows.
 *
 * AVX2 only (chosen at run time); elsewhere the module says so and the caller uses torch. The
 * Python wrapper (`pyg_private.utils.neighbour_sum`) checks dtypes, contiguity, shapes and index
 * ranges before calling: the loop itself reads whatever rows `col` names.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
#define HAVE_AVX2_KERNEL 1
#include <immintrin.h>

__attribute__((target("avx2")))
static void sum_avx2(const int32_t *crow, const int32_t *col, const double *x, double *y, int64_t n, int64_t C) {
    for (int64_t i = 0; i < n; i++) {
        double *yi = y + i * C;
        const int32_t p0 = crow[i], p1 = crow[i + 1];
        int64_t c = 0;
        for (; c + 16 <= C; c += 16) {
            __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
            __m256d a2 = _mm256_setzero_pd(), a3 = _mm256_setzero_pd();
            for (int32_t p = p0; p < p1; p++) {
                const double *xj = x + (int64_t)col[p] * C + c;
                a0 = _mm256_add_pd(a0, _mm256_loadu_pd(xj));
                a1 = _mm256_add_pd(a1, _mm256_loadu_pd(xj + 4));
                a2 = _mm256_add_pd(a2, _mm256_loadu_pd(xj + 8));
                a3 = _mm256_add_pd(a3, _mm256_loadu_pd(xj + 12));
            }
            _mm256_storeu_pd(yi + c, a0);
            _mm256_storeu_pd(yi + c + 4, a1);
            _mm256_storeu_pd(yi + c + 8, a2);
            _mm256_storeu_pd(yi + c + 12, a3);
        }
        for (; c + 4 <= C; c += 4) {
            __m256d a0 = _mm256_setzero_pd();
            for (int32_t p = p0; p < p1; p++)
                a0 = _mm256_add_pd(a0, _mm256_loadu_pd(x + (int64_t)col[p] * C + c));
            _mm256_storeu_pd(yi + c, a0);
        }
        for (; c < C; c++) {
            double a = 0.0;
            for (int32_t p = p0; p < p1; p++)
                a += x[(int64_t)col[p] * C + c];
            yi[c] = a;
        }
    }
}
#endif

static int available(void) {
#ifdef HAVE_AVX2_KERNEL
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") ? 1 : 0;
#else
    return 0;
#endif
}

static PyObject *py_available(PyObject *self, PyObject *args) { return PyBool_FromLong(available()); }

static PyObject *neighbour_sum(PyObject *self, PyObject *args) {
    unsigned long long crow, col, x, y;
    long long n, C;
    if (!PyArg_ParseTuple(args, "KKKKLL", &crow, &col, &x, &y, &n, &C))
        return NULL;
    if (!available()) {
        PyErr_SetString(PyExc_RuntimeError, "neighbour_sum: no AVX2 on this CPU");
        return NULL;
    }
    if (n < 0 || C < 0) {
        PyErr_SetString(PyExc_ValueError, "neighbour_sum: negative size");
        return NULL;
    }
#ifdef HAVE_AVX2_KERNEL
    Py_BEGIN_ALLOW_THREADS
    sum_avx2((const int32_t *)(uintptr_t)crow, (const int32_t *)(uintptr_t)col, (const double *)(uintptr_t)x,
             (double *)(uintptr_t)y, (int64_t)n, (int64_t)C);
    Py_END_ALLOW_THREADS
#endif
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"available", py_available, METH_NOARGS, "available() -> whether the AVX2 kernel runs on this CPU"},
    {"neighbour_sum", neighbour_sum, METH_VARARGS,
     "neighbour_sum(crow, col, x, y, n, C) -> None: y[i] = sum of x[col[p]] over row i (addresses of contiguous "
     "CPU buffers: int32 crow/col, float64 x/y; see pyg_private.utils.neighbour_sum)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_neighbour_sum_native",
                                    "Sum of the neighbours' float64 rows, AVX2 (optional).", -1, methods};

PyMODINIT_FUNC PyInit__neighbour_sum_native(void) { return PyModule_Create(&module); }
