/*
 * The grid step of the safe releases, fused into one loop: every value v of a float32 or float64
 * buffer becomes g * (clamp(round(v * s), -L, L) + k), with k the exact integer noise already drawn
 * (int64), s = 1/g or 1 (a value already on the grid's scale), L = 2^61 and round half to even.
 *
 * It computes exactly what `pyg_private.mechanisms.grid.add_noise_on_grid_` computes with torch
 * operations (tests compare the two bit for bit): the scaling by a power of two is exact in the
 * buffer's dtype, the rounding is the IEEE default (half to even), the clamp keeps the integer
 * within int64, the integer sum wraps as torch's int64 addition does, and the sum is converted to the
 * buffer's dtype (round to nearest) and multiplied by the power of two g. A NaN becomes INT64_MIN
 * before the sum, as torch's conversion does on x86-64. Only the speed differs: one pass over the
 * values and the noise instead of six. Optional, like `_first_pass_native`.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>

#if defined(__x86_64__) || defined(_M_X64)
#include <emmintrin.h>
/* cvtsd2si / cvtss2si: the conversion rounds by the current mode (round to nearest, ties to even, as
 * torch.round's nearbyint does), without a branch: the values sit on both sides of 2^p in
 * magnitude, where a branch between "round" and "already an integer" mispredicts. */
static inline int64_t round_f64(double x) { return _mm_cvtsd_si64(_mm_set_sd(x)); }
static inline int64_t round_f32(float x) { return _mm_cvtss_si64(_mm_set_ss(x)); }
#else
/* Elsewhere: below 2^p in magnitude, adding and subtracting 2^p with x's sign leaves a sum whose unit
 * in the last place is 1, so the hardware rounds it (ties to even); at and above 2^p every value is
 * an integer already. */
static inline int64_t round_f64(double x) {
    const double exact = 4503599627370496.0; /* 2^52 */
    const double m = copysign(exact, x);
    return (int64_t)(fabs(x) < exact ? (x + m) - m : x);
}
static inline int64_t round_f32(float x) {
    const float exact = 8388608.0f; /* 2^23 */
    const float m = copysignf(exact, x);
    return (int64_t)(fabsf(x) < exact ? (x + m) - m : x);
}
#endif

/* The clamp comes first (to +-2^61, an integer: the same result as rounding first), so that the
 * conversion never overflows; a NaN passes both comparisons and is mapped to INT64_MIN. */
static void step_f64(double *v, const int64_t *k, Py_ssize_t n, double s, double g, double lim) {
    for (Py_ssize_t i = 0; i < n; i++) {
        double x = v[i] * s;
        x = x > lim ? lim : (x < -lim ? -lim : x);
        int64_t q = x == x ? round_f64(x) : INT64_MIN;
        q = (int64_t)((uint64_t)q + (uint64_t)k[i]);
        v[i] = (double)q * g;
    }
}

static void step_f32(float *v, const int64_t *k, Py_ssize_t n, float s, float g, float lim) {
    for (Py_ssize_t i = 0; i < n; i++) {
        float x = v[i] * s;
        x = x > lim ? lim : (x < -lim ? -lim : x);
        int64_t q = x == x ? round_f32(x) : INT64_MIN;
        q = (int64_t)((uint64_t)q + (uint64_t)k[i]);
        v[i] = (float)q * g;
    }
}

static PyObject *grid_step(PyObject *self, PyObject *args) {
    unsigned long long values, noise;
    Py_ssize_t n;
    int bits;
    double s, g, lim;
    if (!PyArg_ParseTuple(args, "KKniddd", &values, &noise, &n, &bits, &s, &g, &lim))
        return NULL;
    if (bits != 32 && bits != 64) {
        PyErr_SetString(PyExc_ValueError, "grid_step: the values must be float32 or float64");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    if (bits == 64)
        step_f64((double *)(uintptr_t)values, (const int64_t *)(uintptr_t)noise, n, s, g, lim);
    else
        step_f32((float *)(uintptr_t)values, (const int64_t *)(uintptr_t)noise, n, (float)s, (float)g, (float)lim);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"grid_step", grid_step, METH_VARARGS,
     "grid_step(values, noise, n, bits, scale, granularity, limit) -> None: values <- granularity * "
     "(clamp(round(values * scale), -limit, limit) + noise) in place (addresses of contiguous CPU buffers; "
     "see pyg_private.mechanisms.grid.add_noise_on_grid_)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_grid_step_native",
                                    "Fused grid step of the safe releases (optional).", -1, methods};

PyMODINIT_FUNC PyInit__grid_step_native(void) { return PyModule_Create(&module); }
