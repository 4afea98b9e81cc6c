/*
 * The first pass of the exact integer noise sampler (pyg_private/sampling/sampler.py; this is its
 * native C backend, pyg_private/sampling/backends/native_c.py) fused into one loop over the random
 * words: the alias choice of the cell, the value in the cell and the cheap acceptance threshold,
 * with the indices of the samples the Python code must finish (an alias tie, a tail cell,
 * acceptance bits above the threshold) compacted into `flagged`.
 *
 * It computes exactly what `first_pass` (backends/torch_ops.py) computes with torch operations
 * (integer arithmetic on the same words and tables; tests compare the two bit for bit); only the
 * speed differs. The module is optional: without it (no C compiler when the package was installed)
 * the torch code runs.
 *
 * Pointers come from the Python wrapper (`native_c.native_first_pass`), which checks dtypes
 * (int64), devices (CPU), contiguity and sizes before calling; the GIL is released during the loop
 * so that the sampler's tasks run on several threads.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* floor(v / 2^s) for a signed v (the table entries' bases may be negative): the right shift of a
 * negative value is implementation-defined in C, arithmetic on every compiler this builds with
 * (GCC, Clang and MSVC document it); checked at import by the tests against the torch pass. A
 * branch on the sign instead costs about 2.5 ns a sample in mispredictions. */
static inline int64_t shift_floor(int64_t v, int s) { return v >> s; }

/* One word per sample: the word is [slot | split bits | offset (j bits) | acceptance bits (a)].
 * packed[3 slot + sign(pick - split_high[slot])] = (base << a) | threshold. */
static Py_ssize_t pass_packed(const int64_t *word, Py_ssize_t n, int64_t *out, int64_t *flagged, int64_t start,
                              const int64_t *split_high, const int64_t *packed, int slot_shift, int low_shift,
                              int accept_bits, int64_t offset_mask) {
    const uint64_t amask = (((uint64_t)1) << accept_bits) - 1;
    Py_ssize_t count = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint64_t w = (uint64_t)word[i];
        const int64_t slot = (int64_t)(w >> slot_shift);
        const int64_t d = (int64_t)(w >> low_shift) - split_high[slot];
        const int64_t e = packed[3 * slot + (d > 0) - (d < 0)];
        out[i] = (int64_t)((w >> accept_bits) & (uint64_t)offset_mask) + shift_floor(e, accept_bits);
        flagged[count] = start + i;
        count += (w & amask) >= ((uint64_t)e & amask);
    }
    return count;
}

/* Two or three words per sample: the offsets and acceptance bits come precomputed. */
static Py_ssize_t pass_split(const int64_t *word, const int64_t *offset, const int64_t *bits, Py_ssize_t n,
                             int64_t *out, int64_t *flagged, int64_t start, const int64_t *split_high,
                             const int64_t *base3, const int64_t *cheap3, int slot_shift, int low_shift) {
    Py_ssize_t count = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint64_t w = (uint64_t)word[i];
        const int64_t slot = (int64_t)(w >> slot_shift);
        const int64_t d = (int64_t)(w >> low_shift) - split_high[slot];
        const int64_t k = 3 * slot + (d > 0) - (d < 0);
        out[i] = offset[i] + base3[k];
        flagged[count] = start + i;
        count += bits[i] >= cheap3[k];
    }
    return count;
}

static PyObject *first_pass_packed(PyObject *self, PyObject *args) {
    unsigned long long word, out, flagged, split_high, packed;
    Py_ssize_t n;
    long long start, offset_mask;
    int slot_shift, low_shift, accept_bits;
    if (!PyArg_ParseTuple(args, "KnKKLKKiiiL", &word, &n, &out, &flagged, &start, &split_high, &packed,
                          &slot_shift, &low_shift, &accept_bits, &offset_mask))
        return NULL;
    if (slot_shift < 1 || slot_shift > 63 || low_shift < 0 || low_shift > 63 || accept_bits < 1 || accept_bits > 62) {
        PyErr_SetString(PyExc_ValueError, "first_pass_packed: shift out of range");
        return NULL;
    }
    Py_ssize_t count;
    Py_BEGIN_ALLOW_THREADS
    count = pass_packed((const int64_t *)(uintptr_t)word, n, (int64_t *)(uintptr_t)out, (int64_t *)(uintptr_t)flagged,
                        (int64_t)start, (const int64_t *)(uintptr_t)split_high, (const int64_t *)(uintptr_t)packed,
                        slot_shift, low_shift, accept_bits, (int64_t)offset_mask);
    Py_END_ALLOW_THREADS
    return PyLong_FromSsize_t(count);
}

static PyObject *first_pass_split(PyObject *self, PyObject *args) {
    unsigned long long word, offset, bits, out, flagged, split_high, base3, cheap3;
    Py_ssize_t n;
    long long start;
    int slot_shift, low_shift;
    if (!PyArg_ParseTuple(args, "KKKnKKLKKKii", &word, &offset, &bits, &n, &out, &flagged, &start, &split_high,
                          &base3, &cheap3, &slot_shift, &low_shift))
        return NULL;
    if (slot_shift < 1 || slot_shift > 63 || low_shift < 0 || low_shift > 63) {
        PyErr_SetString(PyExc_ValueError, "first_pass_split: shift out of range");
        return NULL;
    }
    Py_ssize_t count;
    Py_BEGIN_ALLOW_THREADS
    count = pass_split((const int64_t *)(uintptr_t)word, (const int64_t *)(uintptr_t)offset,
                       (const int64_t *)(uintptr_t)bits, n, (int64_t *)(uintptr_t)out, (int64_t *)(uintptr_t)flagged,
                       (int64_t)start, (const int64_t *)(uintptr_t)split_high, (const int64_t *)(uintptr_t)base3,
                       (const int64_t *)(uintptr_t)cheap3, slot_shift, low_shift);
    Py_END_ALLOW_THREADS
    return PyLong_FromSsize_t(count);
}

static PyMethodDef methods[] = {
    {"first_pass_packed", first_pass_packed, METH_VARARGS,
     "first_pass_packed(word, n, out, flagged, start, split_high, packed, slot_shift, low_shift, accept_bits, "
     "offset_mask) -> number of flagged samples (addresses of int64 CPU buffers; see "
     "pyg_private.sampling.backends.native_c)"},
    {"first_pass_split", first_pass_split, METH_VARARGS,
     "first_pass_split(word, offset, bits, n, out, flagged, start, split_high, base3, cheap3, slot_shift, "
     "low_shift) -> number of flagged samples"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_first_pass_native",
                                    "Fused first pass of the exact integer noise sampler (optional).", -1, methods};

PyMODINIT_FUNC PyInit__first_pass_native(void) { return PyModule_Create(&module); }
