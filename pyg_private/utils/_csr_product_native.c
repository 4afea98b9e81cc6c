/*
 * The CSR product y = A x for a float32 or float64 adjacency A (int32 indices) and dense row-major x
 * of C columns: y[i, c] = sum over p in [crow[i], crow[i+1]) of val[p] * x[col[p], c], or of x[col[p], c]
 * alone for an adjacency whose stored values are all 1 (`ones`); in float64 optionally followed by
 * y = (y + z) * scale in the same pass. Also the input side of a diffusion step (clamp and scale
 * every row, `clamp_scale`), the pass that feeds the product.
 *
 * It computes what torch's CSR kernel computes (each entry summed from 0 in the row's CSR order, each
 * term a product rounded before it is added, never a fused multiply-add: the same roundings in the
 * same order, hence the same result bit for bit; tests compare the two), about twice as fast: each
 * output row is built in AVX2 registers, 16 (float64) or 32 (float32) columns at a time, so the only
 * memory traffic is the neighbours' rows.
 *
 * AVX2 only (chosen at run time); elsewhere `available()` is False and the caller uses torch. The
 * Python wrapper (`pyg_private.utils.csr_product`) checks dtypes, contiguity, shapes and index ranges
 * before calling: the loops read whatever rows `col` names.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
#define HAVE_AVX2_KERNEL 1
#include <immintrin.h>

/* float64; val == NULL: every value 1 (no multiplication at all); z != NULL: y = (A x + z) * scale, the
 * sum rounded, then the product (the two roundings of torch's y.add_(z).mul_(scale)) */
__attribute__((target("avx2")))
static void product_f64(const int32_t *crow, const int32_t *col, const double *val, const double *x, double *y,
                        int64_t n, int64_t C, const double *z, double scale) {
    const __m256d sc = _mm256_set1_pd(scale);
    for (int64_t i = 0; i < n; i++) {
        double *yi = y + i * C;
        const double *zi = z == NULL ? NULL : z + i * C;
        const int32_t p0 = crow[i], p1 = crow[i + 1];
        int64_t c = 0;
        for (; c + 16 <= C; c += 16) {
            __m256d a0 = _mm256_setzero_pd(), a1 = _mm256_setzero_pd();
            __m256d a2 = _mm256_setzero_pd(), a3 = _mm256_setzero_pd();
            if (val == NULL) {
                for (int32_t p = p0; p < p1; p++) {
                    const double *xj = x + (int64_t)col[p] * C + c;
                    a0 = _mm256_add_pd(a0, _mm256_loadu_pd(xj));
                    a1 = _mm256_add_pd(a1, _mm256_loadu_pd(xj + 4));
                    a2 = _mm256_add_pd(a2, _mm256_loadu_pd(xj + 8));
                    a3 = _mm256_add_pd(a3, _mm256_loadu_pd(xj + 12));
                }
            } else {
                for (int32_t p = p0; p < p1; p++) {
                    const double *xj = x + (int64_t)col[p] * C + c;
                    const __m256d v = _mm256_set1_pd(val[p]);
                    a0 = _mm256_add_pd(a0, _mm256_mul_pd(v, _mm256_loadu_pd(xj)));
                    a1 = _mm256_add_pd(a1, _mm256_mul_pd(v, _mm256_loadu_pd(xj + 4)));
                    a2 = _mm256_add_pd(a2, _mm256_mul_pd(v, _mm256_loadu_pd(xj + 8)));
                    a3 = _mm256_add_pd(a3, _mm256_mul_pd(v, _mm256_loadu_pd(xj + 12)));
                }
            }
            if (zi != NULL) {
                a0 = _mm256_mul_pd(_mm256_add_pd(a0, _mm256_loadu_pd(zi + c)), sc);
                a1 = _mm256_mul_pd(_mm256_add_pd(a1, _mm256_loadu_pd(zi + c + 4)), sc);
                a2 = _mm256_mul_pd(_mm256_add_pd(a2, _mm256_loadu_pd(zi + c + 8)), sc);
                a3 = _mm256_mul_pd(_mm256_add_pd(a3, _mm256_loadu_pd(zi + c + 12)), sc);
            }
            _mm256_storeu_pd(yi + c, a0);
            _mm256_storeu_pd(yi + c + 4, a1);
            _mm256_storeu_pd(yi + c + 8, a2);
            _mm256_storeu_pd(yi + c + 12, a3);
        }
        for (; c + 4 <= C; c += 4) { /* the remaining blocks of 4: one register each */
            __m256d a0 = _mm256_setzero_pd();
            for (int32_t p = p0; p < p1; p++) {
                const __m256d t = _mm256_loadu_pd(x + (int64_t)col[p] * C + c);
                a0 = _mm256_add_pd(a0, val == NULL ? t : _mm256_mul_pd(_mm256_set1_pd(val[p]), t));
            }
            if (zi != NULL)
                a0 = _mm256_mul_pd(_mm256_add_pd(a0, _mm256_loadu_pd(zi + c)), sc);
            _mm256_storeu_pd(yi + c, a0);
        }
        for (; c < C; c++) {
            double a = 0.0;
            for (int32_t p = p0; p < p1; p++) {
                const double t = x[(int64_t)col[p] * C + c];
                a += val == NULL ? t : val[p] * t;
            }
            if (zi != NULL) {
                const double b = a + zi[c];
                a = b * scale;
            }
            yi[c] = a;
        }
    }
}

__attribute__((target("avx2")))
static void product_f32(const int32_t *crow, const int32_t *col, const float *val, const float *x, float *y,
                        int64_t n, int64_t C) {
    for (int64_t i = 0; i < n; i++) {
        float *yi = y + i * C;
        const int32_t p0 = crow[i], p1 = crow[i + 1];
        int64_t c = 0;
        for (; c + 32 <= C; c += 32) {
            __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
            __m256 a2 = _mm256_setzero_ps(), a3 = _mm256_setzero_ps();
            for (int32_t p = p0; p < p1; p++) {
                const float *xj = x + (int64_t)col[p] * C + c;
                const __m256 v = _mm256_set1_ps(val[p]);
                a0 = _mm256_add_ps(a0, _mm256_mul_ps(v, _mm256_loadu_ps(xj)));
                a1 = _mm256_add_ps(a1, _mm256_mul_ps(v, _mm256_loadu_ps(xj + 8)));
                a2 = _mm256_add_ps(a2, _mm256_mul_ps(v, _mm256_loadu_ps(xj + 16)));
                a3 = _mm256_add_ps(a3, _mm256_mul_ps(v, _mm256_loadu_ps(xj + 24)));
            }
            _mm256_storeu_ps(yi + c, a0);
            _mm256_storeu_ps(yi + c + 8, a1);
            _mm256_storeu_ps(yi + c + 16, a2);
            _mm256_storeu_ps(yi + c + 24, a3);
        }
        for (; c + 8 <= C; c += 8) {
            __m256 a0 = _mm256_setzero_ps();
            for (int32_t p = p0; p < p1; p++)
                a0 = _mm256_add_ps(a0, _mm256_mul_ps(_mm256_set1_ps(val[p]),
                                                     _mm256_loadu_ps(x + (int64_t)col[p] * C + c)));
            _mm256_storeu_ps(yi + c, a0);
        }
        for (; c < C; c++) {
            float a = 0.0f;
            for (int32_t p = p0; p < p1; p++) {
                const float t = val[p] * x[(int64_t)col[p] * C + c]; /* rounded before the sum: no FMA */
                a += t;
            }
            yi[c] = a;
        }
    }
}

/* The input side of a diffusion step, in one pass: xc = clamp(s, 0, hi[i]) and scaled = xc * w[i] for
 * every row i (float64, C columns), the same two operations as torch.clamp and torch.mul. */
__attribute__((target("avx2")))
static void clamp_scale_f64(const double *s, const double *hi, const double *w, double *xc, double *scaled,
                            int64_t n, int64_t C) {
    for (int64_t i = 0; i < n; i++) {
        const double h = hi[i], wi = w[i];
        const double *si = s + i * C;
        double *xi = xc + i * C, *yi = scaled + i * C;
        for (int64_t c = 0; c < C; c++) {
            double v = si[c];
            v = v < 0.0 ? 0.0 : v;
            v = v > h ? h : v;
            xi[c] = v;
            yi[c] = v * wi;
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

static PyObject *csr_product(PyObject *self, PyObject *args) {
    unsigned long long crow, col, val, x, y, z = 0;
    long long n, C;
    int bits;
    double scale = 1.0;
    if (!PyArg_ParseTuple(args, "KKKKKLLi|Kd", &crow, &col, &val, &x, &y, &n, &C, &bits, &z, &scale))
        return NULL;
    if (z != 0 && bits != 64) {
        PyErr_SetString(PyExc_ValueError, "csr_product: the (A x + z) * scale form is float64 only");
        return NULL;
    }
    if (!available()) {
        PyErr_SetString(PyExc_RuntimeError, "csr_product: no AVX2 on this CPU");
        return NULL;
    }
    if (n < 0 || C < 0 || (bits != 32 && bits != 64) || (bits == 32 && val == 0)) {
        PyErr_SetString(PyExc_ValueError, "csr_product: bad sizes or dtype");
        return NULL;
    }
#ifdef HAVE_AVX2_KERNEL
    Py_BEGIN_ALLOW_THREADS
    if (bits == 64)
        product_f64((const int32_t *)(uintptr_t)crow, (const int32_t *)(uintptr_t)col, (const double *)(uintptr_t)val,
                    (const double *)(uintptr_t)x, (double *)(uintptr_t)y, (int64_t)n, (int64_t)C,
                    (const double *)(uintptr_t)z, scale);
    else
        product_f32((const int32_t *)(uintptr_t)crow, (const int32_t *)(uintptr_t)col, (const float *)(uintptr_t)val,
                    (const float *)(uintptr_t)x, (float *)(uintptr_t)y, (int64_t)n, (int64_t)C);
    Py_END_ALLOW_THREADS
#endif
    Py_RETURN_NONE;
}

static PyObject *clamp_scale(PyObject *self, PyObject *args) {
    unsigned long long sp, hi, w, xc, scaled;
    long long n, C;
    if (!PyArg_ParseTuple(args, "KKKKKLL", &sp, &hi, &w, &xc, &scaled, &n, &C))
        return NULL;
    if (!available()) {
        PyErr_SetString(PyExc_RuntimeError, "clamp_scale: no AVX2 on this CPU");
        return NULL;
    }
    if (n < 0 || C < 0) {
        PyErr_SetString(PyExc_ValueError, "clamp_scale: negative size");
        return NULL;
    }
#ifdef HAVE_AVX2_KERNEL
    Py_BEGIN_ALLOW_THREADS
    clamp_scale_f64((const double *)(uintptr_t)sp, (const double *)(uintptr_t)hi, (const double *)(uintptr_t)w,
                    (double *)(uintptr_t)xc, (double *)(uintptr_t)scaled, (int64_t)n, (int64_t)C);
    Py_END_ALLOW_THREADS
#endif
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"clamp_scale", clamp_scale, METH_VARARGS,
     "clamp_scale(s, hi, w, xc, scaled, n, C) -> None: xc = clamp(s, 0, hi[i]), scaled = xc * w[i] (float64, "
     "contiguous CPU buffers; see pyg_private.utils.csr_product.clamp_and_scale_rows)"},
    {"available", py_available, METH_NOARGS, "available() -> whether the AVX2 kernels run on this CPU"},
    {"csr_product", csr_product, METH_VARARGS,
     "csr_product(crow, col, values, x, y, n, C, bits[, z, scale]) -> None: y = A x, or (A x + z) * scale with "
     "z (addresses of contiguous CPU buffers: int32 crow/col, float32 or float64 values/x/y; values 0: every "
     "value 1; z: float64 only; see pyg_private.utils.csr_product)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_csr_product_native",
                                    "CSR products in AVX2 registers (optional).", -1, methods};

PyMODINIT_FUNC PyInit__csr_product_native(void) { return PyModule_Create(&module); }
