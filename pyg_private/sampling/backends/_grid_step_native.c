/*
 * The grid step of the safe releases, fused into one loop: every value v of a float32 or float64
 * buffer becomes g * (clamp(round(v * s), -L, L) + k), with k the exact integer noise already drawn
 * (int64), s = 1/g or 1 (a value already on the grid's scale), L = 2^61 and round half to even.
 *
 * It computes exactly what `pyg_private.sampling.grid.add_noise_on_grid_` computes with torch
 * operations (tests compare the two bit for bit): the scaling by a power of two is exact in the
 * buffer's dtype, the rounding is the IEEE default (half to even), the clamp keeps the integer
 * within int64, the integer sum wraps as torch's int64 addition does, and the sum is converted to the
 * buffer's dtype (round to nearest) and multiplied by the power of two g. A NaN becomes INT64_MIN
 * before the sum, as torch's conversion does on x86-64. Only the speed differs: one pass over the
 * values and the noise instead of six. Optional, like `_first_pass_native`.
 *
 * `grid_first_pass` goes one step further for the exact sampler (one or two words a sample): it forms the noise
 * from the random words (the sampler's first pass) and applies the grid step in the same loop, so the
 * noise is never written out (see pyg_private.sampling.sampler.RoundedNoiseSampler.add_to_grid_).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

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

/* Subnormal inputs in constant time. Arithmetic on a subnormal operand takes a microcode assist on
 * x86 CPUs (tens of times slower a value), which would time how many private values are tiny. So a
 * subnormal value becomes a zero of its sign before it is scaled, by integer operations that cost the
 * same for every value. That changes no result when every subnormal v has |v * s| < 1/2 (it rounds
 * to 0 either way), i.e. when (smallest normal) * s <= 1/2: `flush_ok` below; otherwise (a
 * granularity below twice the smallest normal number) nothing is flushed. */
static inline int flush_ok_f64(double s) { return 2.2250738585072014e-308 * s <= 0.5; }
static inline int flush_ok_f32(float s) { return (double)1.17549435e-38f * (double)s <= 0.5; }
static inline double flush_f64(double v, uint64_t flush) {
    uint64_t b;
    memcpy(&b, &v, sizeof b);
    const uint64_t sub = (uint64_t)(((b >> 52) & 0x7ffu) == 0) & flush; /* 1: subnormal (or zero) */
    b &= ~((0 - sub) & 0x7fffffffffffffffULL);                        /* keep the sign bit only */
    memcpy(&v, &b, sizeof b);
    return v;
}
static inline float flush_f32(float v, uint32_t flush) {
    uint32_t b;
    memcpy(&b, &v, sizeof b);
    const uint32_t sub = (uint32_t)(((b >> 23) & 0xffu) == 0) & flush;
    b &= ~((0 - sub) & 0x7fffffffu);
    memcpy(&v, &b, sizeof b);
    return v;
}

/* The clamp comes first (to +-2^61, an integer: the same result as rounding first), so that the
 * conversion never overflows; a NaN passes both comparisons and is mapped to INT64_MIN. */
static void step_f64(double *v, const int64_t *k, Py_ssize_t n, double s, double g, double lim) {
    const uint64_t flush = (uint64_t)flush_ok_f64(s);
    for (Py_ssize_t i = 0; i < n; i++) {
        double x = flush_f64(v[i], flush) * s;
        x = x > lim ? lim : (x < -lim ? -lim : x);
        int64_t q = x == x ? round_f64(x) : INT64_MIN;
        q = (int64_t)((uint64_t)q + (uint64_t)k[i]);
        v[i] = (double)q * g;
    }
}

static void step_f32(float *v, const int64_t *k, Py_ssize_t n, float s, float g, float lim) {
    const uint32_t flush = (uint32_t)flush_ok_f32(s);
    for (Py_ssize_t i = 0; i < n; i++) {
        float x = flush_f32(v[i], flush) * s;
        x = x > lim ? lim : (x < -lim ? -lim : x);
        int64_t q = x == x ? round_f32(x) : INT64_MIN;
        q = (int64_t)((uint64_t)q + (uint64_t)k[i]);
        v[i] = (float)q * g;
    }
}

/* The exact sampler's first pass fused with the grid step. The noise k of every sample is formed from
 * its words exactly as the first pass of _first_pass_native.c forms it (the same alias choice, offset
 * and base; tests compare the two modules sample for sample), in either word layout:
 *   one word  (`pass_packed`): the word holds slot, split bits, offset and acceptance bits; one table
 *             entry packs the chosen cell's base and cheap threshold;
 *   two words (`pass_split`):  the first word holds slot and split bits, the second the offset (its
 *             high bits) and the acceptance bits; two tables give the base and the threshold.
 * The value becomes g * (clamp(round(v * s)) + k) at once, as `step_f64`/`step_f32` compute it. A
 * sample the cheap threshold does not accept (about 1%) is flagged as in the first pass, and its
 * rounded value q is kept beside its index: the Python code finishes its noise k' and writes
 * g * (q + k') over the provisional value, which is never read. The right shift of the signed packed
 * entry is arithmetic (floor), as the first pass's shift_floor documents. */
typedef struct {
    const int64_t *word, *word2; /* word2: the second words (two-word layout), NULL for one word */
    const int64_t *split_high, *t1, *t2; /* t1: packed (one word) or base; t2: the thresholds (two words) */
    int slot_shift, low_shift, accept_bits;
    int64_t offset_mask;
} Layout;

/* k and the flag of sample i, scalar */
static inline int64_t noise_of(const Layout *L, Py_ssize_t i, int *flag) {
    const uint64_t w = (uint64_t)L->word[i];
    const int64_t slot = (int64_t)(w >> L->slot_shift);
    const int64_t d = (int64_t)(w >> L->low_shift) - L->split_high[slot];
    const int64_t pick = 3 * slot + (d > 0) - (d < 0);
    const uint64_t amask = (((uint64_t)1) << L->accept_bits) - 1;
    if (L->word2 == NULL) {
        const int64_t e = L->t1[pick];
        *flag = (w & amask) >= ((uint64_t)e & amask);
        return (int64_t)((w >> L->accept_bits) & (uint64_t)L->offset_mask) + (e >> L->accept_bits);
    }
    const uint64_t u = (uint64_t)L->word2[i];
    *flag = (int64_t)(u & amask) >= L->t2[pick];
    return (int64_t)(u >> L->accept_bits) + L->t1[pick];
}

#define GRID_FIRST_PASS(NAME, T, ROUND, FLUSH, FLUSH_OK, U)                                                  \
    static Py_ssize_t NAME(const Layout *L, Py_ssize_t from, Py_ssize_t n, T *v, int64_t *flagged,            \
                           int64_t *kept, Py_ssize_t count, int64_t start, T s, T g, T lim) {                 \
        const U flush = (U)FLUSH_OK(s);                                                                       \
        for (Py_ssize_t i = from; i < n; i++) {                                                               \
            int flag;                                                                                         \
            const int64_t k = noise_of(L, i, &flag);                                                          \
            T x = FLUSH(v[i], flush) * s;                                                                     \
            x = x > lim ? lim : (x < -lim ? -lim : x);                                                        \
            const int64_t q = x == x ? ROUND(x) : INT64_MIN;                                                  \
            v[i] = (T)(int64_t)((uint64_t)q + (uint64_t)k) * g;                                               \
            flagged[count] = start + i;                                                                       \
            kept[count] = q;                                                                                  \
            count += flag;                                                                                    \
        }                                                                                                     \
        return count;                                                                                         \
    }
GRID_FIRST_PASS(grid_pass_f64, double, round_f64, flush_f64, flush_ok_f64, uint64_t)
GRID_FIRST_PASS(grid_pass_f32, float, round_f32, flush_f32, flush_ok_f32, uint32_t)

#if (defined(__GNUC__) || defined(__clang__)) && defined(__x86_64__)
#define HAVE_AVX512_PASS 1
#include <immintrin.h>

/* k and the flags of samples i..i+7 in AVX-512 registers: every operation is the scalar one lane by
 * lane (the table reads are gathers, the sign of d selects the entry by masked adds). */
__attribute__((target("avx512f,avx512dq"))) static inline __m512i noise_of8(const Layout *L, Py_ssize_t i,
                                                                            __mmask8 *flag) {
    const __m128i cs = _mm_cvtsi64_si128(L->slot_shift), cl = _mm_cvtsi64_si128(L->low_shift),
                  ca = _mm_cvtsi64_si128(L->accept_bits);
    const __m512i am = _mm512_set1_epi64((int64_t)((((uint64_t)1) << L->accept_bits) - 1)),
                  one = _mm512_set1_epi64(1), zero = _mm512_setzero_si512();
    const __m512i w = _mm512_loadu_si512((const void *)(L->word + i));
    const __m512i slot = _mm512_srl_epi64(w, cs);
    const __m512i d =
        _mm512_sub_epi64(_mm512_srl_epi64(w, cl), _mm512_i64gather_epi64(slot, (const void *)L->split_high, 8));
    __m512i pick = _mm512_add_epi64(slot, _mm512_add_epi64(slot, slot));
    pick = _mm512_mask_add_epi64(pick, _mm512_cmpgt_epi64_mask(d, zero), pick, one);
    pick = _mm512_mask_sub_epi64(pick, _mm512_cmplt_epi64_mask(d, zero), pick, one);
    if (L->word2 == NULL) {
        const __m512i e = _mm512_i64gather_epi64(pick, (const void *)L->t1, 8);
        *flag = _mm512_cmpge_epu64_mask(_mm512_and_si512(w, am), _mm512_and_si512(e, am));
        return _mm512_add_epi64(_mm512_and_si512(_mm512_srl_epi64(w, ca), _mm512_set1_epi64(L->offset_mask)),
                                _mm512_sra_epi64(e, ca));
    }
    const __m512i u = _mm512_loadu_si512((const void *)(L->word2 + i));
    *flag = _mm512_cmpge_epi64_mask(_mm512_and_si512(u, am), _mm512_i64gather_epi64(pick, (const void *)L->t2, 8));
    return _mm512_add_epi64(_mm512_srl_epi64(u, ca), _mm512_i64gather_epi64(pick, (const void *)L->t1, 8));
}

/* The fused loop eight samples at a time (run where the CPU has AVX-512F and DQ; the remainder goes
 * through the scalar loop). The conversions round to nearest as cvtsd2si/cvtsi2sd do (a NaN converts
 * to INT64_MIN, the "integer indefinite"), and the clamp is min then max with the value as the second
 * operand, which passes a NaN through as the scalar comparisons do. The flagged samples (a mask) are
 * written in lane order. The tests compare this loop with the scalar one bit for bit. */
#define GRID_PASS_AVX512(NAME, T, LOAD_SCALE_CLAMP_ROUND, STORE_SCALED)                                      \
    __attribute__((target("avx512f,avx512dq"))) static Py_ssize_t NAME(                                      \
        const Layout *L, Py_ssize_t n, T *v, int64_t *flagged, int64_t *kept, int64_t start, T s, T g, T lim, \
        Py_ssize_t *done) {                                                                                   \
        Py_ssize_t count = 0, i = 0;                                                                          \
        const int flush = sizeof(T) == 8 ? flush_ok_f64((double)s) : flush_ok_f32((float)s);                  \
        for (; i + 8 <= n; i += 8) {                                                                          \
            __mmask8 flag;                                                                                    \
            const __m512i k = noise_of8(L, i, &flag);                                                         \
            LOAD_SCALE_CLAMP_ROUND                                                                            \
            STORE_SCALED                                                                                      \
            if (flag) {                                                                                       \
                int64_t lane[8];                                                                              \
                _mm512_storeu_si512((void *)lane, q);                                                         \
                for (unsigned m = flag; m; m &= m - 1) {                                                      \
                    const int b = __builtin_ctz(m);                                                           \
                    flagged[count] = start + i + b;                                                           \
                    kept[count++] = lane[b];                                                                  \
                }                                                                                             \
            }                                                                                                 \
        }                                                                                                     \
        *done = i;                                                                                            \
        return count;                                                                                         \
    }
GRID_PASS_AVX512(grid_pass_f64_avx512, double,
                 /* subnormals to signed zeros (see flush_f64), lane by lane with integer operations */
                 __m512i b = _mm512_castpd_si512(_mm512_loadu_pd(v + i));
                 const __mmask8 sub = _mm512_cmpeq_epi64_mask(
                     _mm512_and_si512(b, _mm512_set1_epi64(0x7ff0000000000000LL)), _mm512_setzero_si512());
                 b = _mm512_mask_and_epi64(b, flush ? sub : 0, b, _mm512_set1_epi64((long long)0x8000000000000000ULL));
                 __m512d x = _mm512_mul_pd(_mm512_castsi512_pd(b), _mm512_set1_pd(s));
                 x = _mm512_max_pd(_mm512_set1_pd(-lim), _mm512_min_pd(_mm512_set1_pd(lim), x));
                 const __m512i q = _mm512_cvtpd_epi64(x);,
                 _mm512_storeu_pd(v + i, _mm512_mul_pd(_mm512_cvtepi64_pd(_mm512_add_epi64(q, k)),
                                                       _mm512_set1_pd(g)));)
GRID_PASS_AVX512(grid_pass_f32_avx512, float,
                 __m256i b = _mm256_castps_si256(_mm256_loadu_ps(v + i));
                 const __m256i sub = _mm256_and_si256(
                     _mm256_cmpeq_epi32(_mm256_and_si256(b, _mm256_set1_epi32(0x7f800000)), _mm256_setzero_si256()),
                     _mm256_set1_epi32(flush ? 0x7fffffff : 0));
                 b = _mm256_andnot_si256(sub, b);
                 __m256 x = _mm256_mul_ps(_mm256_castsi256_ps(b), _mm256_set1_ps(s));
                 x = _mm256_max_ps(_mm256_set1_ps(-lim), _mm256_min_ps(_mm256_set1_ps(lim), x));
                 const __m512i q = _mm512_cvtps_epi64(x);,
                 _mm256_storeu_ps(v + i, _mm256_mul_ps(_mm512_cvtepi64_ps(_mm512_add_epi64(q, k)),
                                                       _mm256_set1_ps(g)));)
#endif

static int simd_available(void) {
#ifdef HAVE_AVX512_PASS
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
#else
    return 0;
#endif
}

static PyObject *py_simd_available(PyObject *self, PyObject *args) { return PyBool_FromLong(simd_available()); }

static PyObject *grid_first_pass(PyObject *self, PyObject *args) {
    unsigned long long word, word2, values, flagged, kept, split_high, t1, t2;
    Py_ssize_t n;
    long long start, offset_mask;
    int bits, slot_shift, low_shift, accept_bits, simd = 1;
    double s, g, lim;
    if (!PyArg_ParseTuple(args, "KKnKidddKKLKKKiiiL|p", &word, &word2, &n, &values, &bits, &s, &g, &lim, &flagged,
                          &kept, &start, &split_high, &t1, &t2, &slot_shift, &low_shift, &accept_bits, &offset_mask,
                          &simd))
        return NULL;
    if (bits != 32 && bits != 64) {
        PyErr_SetString(PyExc_ValueError, "grid_first_pass: the values must be float32 or float64");
        return NULL;
    }
    if (slot_shift < 1 || slot_shift > 63 || low_shift < 0 || low_shift > 63 || accept_bits < 1 || accept_bits > 63 ||
        (word2 == 0 && accept_bits > 62) || (word2 != 0 && t2 == 0)) {
        PyErr_SetString(PyExc_ValueError, "grid_first_pass: shift out of range or table missing");
        return NULL;
    }
    const Layout L = {(const int64_t *)(uintptr_t)word, (const int64_t *)(uintptr_t)word2,
                      (const int64_t *)(uintptr_t)split_high, (const int64_t *)(uintptr_t)t1,
                      (const int64_t *)(uintptr_t)t2, slot_shift, low_shift, accept_bits, (int64_t)offset_mask};
    simd = simd && simd_available();
    Py_ssize_t count = 0, done = 0;
    int64_t *fl = (int64_t *)(uintptr_t)flagged, *kp = (int64_t *)(uintptr_t)kept;
    Py_BEGIN_ALLOW_THREADS
    if (bits == 64) {
        double *v = (double *)(uintptr_t)values;
#ifdef HAVE_AVX512_PASS
        if (simd)
            count = grid_pass_f64_avx512(&L, n, v, fl, kp, (int64_t)start, s, g, lim, &done);
#endif
        count = grid_pass_f64(&L, done, n, v, fl, kp, count, (int64_t)start, s, g, lim);
    } else {
        float *v = (float *)(uintptr_t)values;
#ifdef HAVE_AVX512_PASS
        if (simd)
            count = grid_pass_f32_avx512(&L, n, v, fl, kp, (int64_t)start, (float)s, (float)g, (float)lim, &done);
#endif
        count = grid_pass_f32(&L, done, n, v, fl, kp, count, (int64_t)start, (float)s, (float)g, (float)lim);
    }
    Py_END_ALLOW_THREADS
    return PyLong_FromSsize_t(count);
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
     "see pyg_private.sampling.grid.add_noise_on_grid_)"},
    {"grid_first_pass", grid_first_pass, METH_VARARGS,
     "grid_first_pass(word, word2, n, values, bits, scale, granularity, limit, flagged, kept, start, split_high, "
     "table1, table2, slot_shift, low_shift, accept_bits, offset_mask[, simd]) -> number of flagged samples: the "
     "sampler's first pass (one word a sample: word2 = 0, table1 the packed entries; two: table1 the bases, table2 "
     "the thresholds) fused with the grid step (see pyg_private.sampling.sampler.RoundedNoiseSampler.add_to_grid_); simd=False "
     "keeps to the scalar loop (the same results)"},
    {"simd_available", py_simd_available, METH_NOARGS,
     "simd_available() -> whether grid_first_pass runs its AVX-512 loop on this CPU"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_grid_step_native",
                                    "Fused grid step of the safe releases (optional).", -1, methods};

PyMODINIT_FUNC PyInit__grid_step_native(void) { return PyModule_Create(&module); }
