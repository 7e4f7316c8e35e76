/* The portable numerics profile's matrix products: one fixed order of operations on every host.
 *
 * Each output element is C[m][n] = fold over k = 0, 1, ..., K-1 of acc = fma(A[m][k], B[k][n], acc),
 * starting from init[n] (a bias) or 0: one fused multiply-add per k, in increasing k, one accumulator.
 * The AVX2 kernel vectorises across output elements (16 columns × 6 rows in registers), never across k,
 * so it rounds exactly as the scalar loop does with fmaf (a correctly rounded fused multiply-add is one
 * IEEE operation: its result does not depend on the instruction that computed it). Tile sizes (MR, NR)
 * are constants of this file, never read from the host; they decide only which elements are computed
 * together, not any element's value. So AVX2 (with or without AVX-512 on the CPU, Intel or AMD) and the
 * scalar fallback give the same bits: tests/unit/test_portable_ops.py checks it, forcing the scalar path.
 *
 * Besides the product: im2col / col2im for NHWC images (a convolution as a product) and the column sum
 * of a bias's gradient, plain loops whose element order is fixed (each element a sequence of float
 * additions; the build turns off contraction, -ffp-contract=off).
 *
 * Arguments are addresses (tensor.data_ptr()) and sizes; edgebed/portable_ops.py checks shapes, dtypes
 * and contiguity before calling. The GIL is released while computing.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_X86 1
#include <immintrin.h>
#else
#define HAVE_X86 0
#endif

#define MR 6
#define NR 16

static int use_avx2 = 0;

/* Working space: per thread, slot 0 for a product's packed operands, slot 1 for a convolution's patches;
 * grown as needed and kept (a fresh multi-megabyte allocation per call costs its page faults every time:
 * as much as the product, measured). */
static __thread float *work[2] = {NULL, NULL};
static __thread size_t work_cap[2] = {0, 0};

/* Working space beyond this many floats (64 MiB) is given back after each call instead of kept. */
#define KEEP_FLOATS ((size_t)16 << 20)

static void trim(void) {
    for (int slot = 0; slot < 2; slot++)
        if (work_cap[slot] > KEEP_FLOATS) {
            free(work[slot]);
            work[slot] = NULL;
            work_cap[slot] = 0;
        }
}

static float *workspace(int slot, size_t n) {
    n = (n + 15) / 16 * 16;
    if (n > work_cap[slot]) {
        free(work[slot]);
        work[slot] = aligned_alloc(64, n * sizeof(float));
        work_cap[slot] = work[slot] ? n : 0;
    }
    return work[slot];
}

/* One MR×NR tile: c[i*ldc + j] = fold_k fma(ap[i*ars + k*lda], bp[k*ldb + j], c0[i*NR + j] or 0). A packed
 * panel has ars 1, lda MR; a row-major A read in place has its row stride and lda 1. */
static void tile_scalar(Py_ssize_t K, const float *ap, Py_ssize_t ars, Py_ssize_t lda, const float *bp, Py_ssize_t ldb,
                        const float *c0, float *c, Py_ssize_t ldc) {
    for (int i = 0; i < MR; i++)
        for (int j = 0; j < NR; j++) {
            float acc = c0 ? c0[i * NR + j] : 0.0f;
            for (Py_ssize_t k = 0; k < K; k++)
                acc = fmaf(ap[i * ars + k * lda], bp[k * ldb + j], acc);
            c[i * ldc + j] = acc;
        }
}

#if HAVE_X86
#define LOAD0(r, off) (c0 ? _mm256_loadu_ps(c0 + (r) * NR + (off)) : _mm256_setzero_ps())
__attribute__((target("avx2,fma")))
static void tile_avx2(Py_ssize_t K, const float *ap, Py_ssize_t ars, Py_ssize_t lda, const float *bp, Py_ssize_t ldb,
                      const float *c0, float *c, Py_ssize_t ldc) {
    const float *aq = ap + 3 * ars;
    __m256 c00 = LOAD0(0, 0), c01 = LOAD0(0, 8), c10 = LOAD0(1, 0), c11 = LOAD0(1, 8);
    __m256 c20 = LOAD0(2, 0), c21 = LOAD0(2, 8), c30 = LOAD0(3, 0), c31 = LOAD0(3, 8);
    __m256 c40 = LOAD0(4, 0), c41 = LOAD0(4, 8), c50 = LOAD0(5, 0), c51 = LOAD0(5, 8);
    for (Py_ssize_t k = 0; k < K; k++) {
        __m256 b0 = _mm256_loadu_ps(bp), b1 = _mm256_loadu_ps(bp + 8), a;
        a = _mm256_broadcast_ss(ap + 0); c00 = _mm256_fmadd_ps(a, b0, c00); c01 = _mm256_fmadd_ps(a, b1, c01);
        a = _mm256_broadcast_ss(ap + ars); c10 = _mm256_fmadd_ps(a, b0, c10); c11 = _mm256_fmadd_ps(a, b1, c11);
        a = _mm256_broadcast_ss(ap + 2 * ars); c20 = _mm256_fmadd_ps(a, b0, c20); c21 = _mm256_fmadd_ps(a, b1, c21);
        a = _mm256_broadcast_ss(aq + 0); c30 = _mm256_fmadd_ps(a, b0, c30); c31 = _mm256_fmadd_ps(a, b1, c31);
        a = _mm256_broadcast_ss(aq + ars); c40 = _mm256_fmadd_ps(a, b0, c40); c41 = _mm256_fmadd_ps(a, b1, c41);
        a = _mm256_broadcast_ss(aq + 2 * ars); c50 = _mm256_fmadd_ps(a, b0, c50); c51 = _mm256_fmadd_ps(a, b1, c51);
        ap += lda;
        aq += lda;
        bp += ldb;
    }
    _mm256_storeu_ps(c + 0 * ldc, c00); _mm256_storeu_ps(c + 0 * ldc + 8, c01);
    _mm256_storeu_ps(c + 1 * ldc, c10); _mm256_storeu_ps(c + 1 * ldc + 8, c11);
    _mm256_storeu_ps(c + 2 * ldc, c20); _mm256_storeu_ps(c + 2 * ldc + 8, c21);
    _mm256_storeu_ps(c + 3 * ldc, c30); _mm256_storeu_ps(c + 3 * ldc + 8, c31);
    _mm256_storeu_ps(c + 4 * ldc, c40); _mm256_storeu_ps(c + 4 * ldc + 8, c41);
    _mm256_storeu_ps(c + 5 * ldc, c50); _mm256_storeu_ps(c + 5 * ldc + 8, c51);
}
#undef LOAD0

static int host_has_avx2_fma(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
#else
static int host_has_avx2_fma(void) { return 0; }
#endif

/* One tile into C at out (row stride crs, column stride ccs), mr×nr of it real: computed in place when whole
 * and row-major, else through ``tile`` and copied. */
static void store_tile(Py_ssize_t K, const float *pa, Py_ssize_t pars, Py_ssize_t plda, const float *bi, Py_ssize_t ldb,
                       const float *ci, float *out, Py_ssize_t crs, Py_ssize_t ccs, int mr, int nr, float *tile) {
    int full = ccs == 1 && mr == MR && nr == NR;
    float *dst = full ? out : tile;
    Py_ssize_t ldd = full ? crs : NR;
#if HAVE_X86
    if (use_avx2)
        tile_avx2(K, pa, pars, plda, bi, ldb, ci, dst, ldd);
    else
#endif
        tile_scalar(K, pa, pars, plda, bi, ldb, ci, dst, ldd);
    if (full)
        return;
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nr; j++)
            out[i * crs + j * ccs] = tile[i * NR + j];
}

/* A rough cost, in cycles, of tiling an M×N product over K with A[m][k] at a[m*ars + k*acs] and B[k][n] at
 * b[k*brs + n*bcs]: kernel steps, packing, and re-reading whichever operand the loops sweep again where it is
 * too large to stay in a core's cache. Decides only the orientation (C or Cᵀ): both give the same bits. */
static double plan_cost(Py_ssize_t M, Py_ssize_t N, Py_ssize_t K, Py_ssize_t ars, Py_ssize_t acs, Py_ssize_t bcs) {
    double mp = (double)((M + MR - 1) / MR), np_ = (double)((N + NR - 1) / NR), k = (double)K;
    int whole = acs > ars, direct_a = !whole && acs == 1, direct_b = bcs == 1 && N % NR == 0;
    double cost = mp * np_ * k * 6.0;
    cost += whole ? 2.0 * (double)M * k : direct_a ? 0.0 : (double)M * k;
    cost += direct_b ? 0.0 : (double)N * k;
    double again = whole ? mp * MR * k * 4.0 : np_ * NR * k * 4.0;   /* the operand swept once per panel of the other */
    if (again > 512 * 1024)
        cost += (whole ? np_ : mp) * again / 16.0;
    return cost;
}

/* C[m][n] = c[m*crs + n*ccs] = fold_k fma(A[m][k], B[k][n], init) with A[m][k] = a[m*ars + k*acs],
 * B[k][n] = b[k*brs + n*bcs], init = init[n] (init_rows 0) or init[m] (init_rows 1) or 0 (init NULL).
 * Which of C and Cᵀ = Bᵀ·Aᵀ is tiled follows the shapes (the smaller operand packed whole, the larger
 * streamed in row panels): each element's fold is the same either way. */
static int gemm(const float *a, Py_ssize_t ars, Py_ssize_t acs, const float *b, Py_ssize_t brs, Py_ssize_t bcs,
                float *c, Py_ssize_t crs, Py_ssize_t ccs, Py_ssize_t M, Py_ssize_t N, Py_ssize_t K,
                const float *init, int init_rows) {
    /* Tile Cᵀ = Bᵀ·Aᵀ where that is cheaper (with a short K, keep the output's layout). */
    if (K >= 32 && plan_cost(N, M, K, bcs, brs, acs) < plan_cost(M, N, K, ars, acs, bcs)) {
        const float *t = a; a = b; b = t;
        Py_ssize_t s;
        s = ars; ars = bcs; bcs = s;
        s = acs; acs = brs; brs = s;
        s = crs; crs = ccs; ccs = s;
        s = M; M = N; N = s;
        init_rows = !init_rows;
    }
    Py_ssize_t np_ = (N + NR - 1) / NR, mp = (M + MR - 1) / MR;
    int whole = acs > ars;
    size_t nb = (size_t)((bcs == 1 && N % NR == 0 ? 0 : np_ * NR * K) + 15) / 16 * 16;
    size_t na = (size_t)(MR * K * (whole ? mp : 1) + 15) / 16 * 16;
    float *bp = workspace(0, nb + na + (size_t)(np_ + 1) * MR * NR);
    if (!bp)
        return -1;
    float *ap = bp + nb, *c0 = ap + na;   /* initial tiles: one per column panel, or one per row panel */
    if (init && !init_rows)
        for (Py_ssize_t p = 0; p < np_; p++)
            for (int i = 0; i < MR; i++)
                for (int j = 0; j < NR; j++)
                    c0[(p * MR + i) * NR + j] = p * NR + j < N ? init[p * NR + j] : 0.0f;
    /* B in panels of NR columns, each K×NR row-major, zero columns past N; read along b's short stride.
     * Rows already contiguous and whole panels wide: read in place. */
    int direct = bcs == 1 && N % NR == 0;
    Py_ssize_t ldb = direct ? brs : NR;
    for (Py_ssize_t p = 0; p < (direct ? 0 : np_); p++) {
        float *dst = bp + p * NR * K;
        int nr = N - p * NR < NR ? (int)(N - p * NR) : NR;
        const float *src = b + p * NR * bcs;
        if (bcs <= brs) {
            for (Py_ssize_t k = 0; k < K; k++) {
                for (int j = 0; j < nr; j++)
                    dst[k * NR + j] = src[k * brs + j * bcs];
                for (int j = nr; j < NR; j++)
                    dst[k * NR + j] = 0.0f;
            }
        } else {
            for (int j = 0; j < NR; j++)
                for (Py_ssize_t k = 0; k < K; k++)
                    dst[k * NR + j] = j < nr ? src[k * brs + j * bcs] : 0.0f;
        }
    }
    /* A in panels of MR rows, each K×MR: row by row when a's rows are contiguous; else (a transposed) all
     * panels at once in one pass along a's rows, so each source line is read once. */
    if (whole) {   /* a blocked transpose: 16 source rows (in L1) at a time, every panel's slice of them */
        for (Py_ssize_t k0 = 0; k0 < K; k0 += 16) {
            Py_ssize_t k1 = K - k0 < 16 ? K : k0 + 16;
            for (Py_ssize_t p = 0; p < mp; p++) {
                float *dst = ap + p * MR * K;
                int mr = M - p * MR < MR ? (int)(M - p * MR) : MR;
                for (Py_ssize_t k = k0; k < k1; k++) {
                    const float *src = a + p * MR * ars + k * acs;
                    for (int i = 0; i < MR; i++)
                        dst[k * MR + i] = i < mr ? src[i * ars] : 0.0f;
                }
            }
        }
    }
    float tile[MR * NR];
    if (whole) {   /* every A panel packed: sweep them under each B panel, which stays in cache */
        for (Py_ssize_t p = 0; p < np_; p++) {
            int nr = N - p * NR < NR ? (int)(N - p * NR) : NR;
            const float *bi = direct ? b + p * NR : bp + p * NR * K;
            for (Py_ssize_t m0 = 0; m0 < M; m0 += MR) {
                int mr = M - m0 < MR ? (int)(M - m0) : MR;
                if (init && init_rows)
                    for (int i = 0; i < MR; i++)
                        for (int j = 0; j < NR; j++)
                            c0[i * NR + j] = i < mr ? init[m0 + i] : 0.0f;
                const float *ci = !init ? NULL : init_rows ? c0 : c0 + p * MR * NR;
                store_tile(K, ap + (m0 / MR) * MR * K, 1, MR, bi, ldb, ci, c + m0 * crs + p * NR * ccs, crs, ccs,
                           mr, nr, tile);
            }
        }
        return 0;
    }
    for (Py_ssize_t m0 = 0; m0 < M; m0 += MR) {
        int mr = M - m0 < MR ? (int)(M - m0) : MR;
        const float *src = a + m0 * ars;
        const float *pa = ap;
        Py_ssize_t pars = 1, plda = MR;
        if (mr == MR && acs == 1) {   /* whole rows, contiguous: read in place */
            pa = src;
            pars = ars;
            plda = 1;
        } else {
            for (int i = 0; i < MR; i++)
                for (Py_ssize_t k = 0; k < K; k++)
                    ap[k * MR + i] = i < mr ? src[i * ars + k * acs] : 0.0f;
        }
        if (init && init_rows)   /* rows past M start at 0: computed, never stored */
            for (int i = 0; i < MR; i++)
                for (int j = 0; j < NR; j++)
                    c0[i * NR + j] = i < mr ? init[m0 + i] : 0.0f;
        for (Py_ssize_t p = 0; p < np_; p++) {
            int nr = N - p * NR < NR ? (int)(N - p * NR) : NR;
            const float *bi = direct ? b + p * NR : bp + p * NR * K, *ci = !init ? NULL : init_rows ? c0 : c0 + p * MR * NR;
            store_tile(K, pa, pars, plda, bi, ldb, ci, c + m0 * crs + p * NR * ccs, crs, ccs, mr, nr, tile);
        }
    }
    return 0;
}

static PyObject *py_gemm(PyObject *self, PyObject *args) {
    unsigned long long a, b, c, init;
    Py_ssize_t ars, acs, brs, bcs, ldc, M, N, K;
    if (!PyArg_ParseTuple(args, "KnnKnnKnnnnK", &a, &ars, &acs, &b, &brs, &bcs, &c, &ldc, &M, &N, &K, &init))
        return NULL;
    if (M < 0 || N < 0 || K < 0) {
        PyErr_SetString(PyExc_ValueError, "gemm: negative size");
        return NULL;
    }
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = gemm((const float *)(uintptr_t)a, ars, acs, (const float *)(uintptr_t)b, brs, bcs, (float *)(uintptr_t)c,
              ldc, 1, M, N, K, init ? (const float *)(uintptr_t)init : NULL, 0);
    trim();
    Py_END_ALLOW_THREADS
    if (rc)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
}

/* Convolution geometry: N images H×W×C (NHWC), a KH×KW kernel, padding PH, PW, stride SH, SW, output OH×OW. */
typedef struct { Py_ssize_t N, H, W, C, KH, KW, PH, PW, SH, SW, OH, OW; } geometry;
#define GEO_FORMAT "nnnnnnnnnnnn"
#define GEO_ARGS(g) &g.N, &g.H, &g.W, &g.C, &g.KH, &g.KW, &g.PH, &g.PW, &g.SH, &g.SW, &g.OH, &g.OW

/* cols row p = (n, oh, ow) holds the patch in (kh, kw, c) order, zeros where it leaves the image. */
static void im2col(const float *x, float *cols, geometry g) {
    Py_ssize_t N = g.N, H = g.H, W = g.W, C = g.C, KH = g.KH, KW = g.KW, PH = g.PH, PW = g.PW, SH = g.SH,
               SW = g.SW, OH = g.OH, OW = g.OW;
    Py_ssize_t kc = KH * KW * C;
    for (Py_ssize_t n = 0; n < N; n++)
        for (Py_ssize_t oh = 0; oh < OH; oh++) {
            float *rows = cols + (n * OH + oh) * OW * kc;
            for (Py_ssize_t i = 0; i < KH; i++) {
                Py_ssize_t h = oh * SH - PH + i;
                for (Py_ssize_t j = 0; j < KW; j++) {
                    /* output columns whose tap (i, j) falls inside the image: [lo, hi) */
                    Py_ssize_t lo = 0, hi = 0;
                    if (h >= 0 && h < H) {
                        lo = PW - j > 0 ? (PW - j + SW - 1) / SW : 0;
                        hi = W + PW - j > 0 ? (W + PW - j + SW - 1) / SW : 0;
                        hi = hi < OW ? hi : OW;
                        lo = lo < hi ? lo : hi;
                    }
                    float *dst = rows + (i * KW + j) * C;
                    const float *src = x + ((n * H + (h >= 0 && h < H ? h : 0)) * W) * C;
                    for (Py_ssize_t ow = 0; ow < lo; ow++)
                        for (Py_ssize_t c = 0; c < C; c++)
                            dst[ow * kc + c] = 0.0f;
                    if (C == 1) {
                        for (Py_ssize_t ow = lo; ow < hi; ow++)
                            dst[ow * kc] = src[ow * SW - PW + j];
                    } else {
                        for (Py_ssize_t ow = lo; ow < hi; ow++)
                            memcpy(dst + ow * kc, src + (ow * SW - PW + j) * C, (size_t)C * sizeof(float));
                    }
                    for (Py_ssize_t ow = hi; ow < OW; ow++)
                        for (Py_ssize_t c = 0; c < C; c++)
                            dst[ow * kc + c] = 0.0f;
                }
            }
        }
}

/* im2col(x, cols, geometry...): x NHWC contiguous, cols [N·OH·OW, KH·KW·C]. */
static PyObject *py_im2col(PyObject *self, PyObject *args) {
    unsigned long long xa, ca;
    geometry g;
    if (!PyArg_ParseTuple(args, "KK" GEO_FORMAT, &xa, &ca, GEO_ARGS(g)))
        return NULL;
    Py_BEGIN_ALLOW_THREADS
    im2col((const float *)(uintptr_t)xa, (float *)(uintptr_t)ca, g);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/* conv(x, w, init, out, geometry...): out [N·OH·OW, O] = patches(x) · wᵀ (+ init per column), w [O, KH·KW·C]
 * row-major: a convolution's forward, and (on the padded output gradient, flipped kernel) its input's
 * gradient. The patches live in this thread's working space, not in a fresh tensor. */
static PyObject *py_conv(PyObject *self, PyObject *args) {
    unsigned long long xa, wa, ia, oa;
    Py_ssize_t O;
    geometry g;
    if (!PyArg_ParseTuple(args, "KKKKn" GEO_FORMAT, &xa, &wa, &ia, &oa, &O, GEO_ARGS(g)))
        return NULL;
    Py_ssize_t P = g.N * g.OH * g.OW, kc = g.KH * g.KW * g.C;
    int rc = -1;
    Py_BEGIN_ALLOW_THREADS
    float *cols = workspace(1, (size_t)(P * kc));
    if (cols) {
        im2col((const float *)(uintptr_t)xa, cols, g);
        rc = gemm(cols, kc, 1, (const float *)(uintptr_t)wa, 1, kc, (float *)(uintptr_t)oa, O, 1, P, O, kc,
                  ia ? (const float *)(uintptr_t)ia : NULL, 0);
    }
    trim();
    Py_END_ALLOW_THREADS
    if (rc)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
}

/* conv_wgrad(x, d, dw, O, geometry...): dw [O, KH·KW·C] = dᵀ · patches(x), d [N·OH·OW, O]: each element
 * summed over positions in increasing order. */
static PyObject *py_conv_wgrad(PyObject *self, PyObject *args) {
    unsigned long long xa, da, wa;
    Py_ssize_t O;
    geometry g;
    if (!PyArg_ParseTuple(args, "KKKn" GEO_FORMAT, &xa, &da, &wa, &O, GEO_ARGS(g)))
        return NULL;
    Py_ssize_t P = g.N * g.OH * g.OW, kc = g.KH * g.KW * g.C;
    int rc = -1;
    Py_BEGIN_ALLOW_THREADS
    float *cols = workspace(1, (size_t)(P * kc));
    if (cols) {
        im2col((const float *)(uintptr_t)xa, cols, g);
        rc = gemm((const float *)(uintptr_t)da, 1, O, cols, kc, 1, (float *)(uintptr_t)wa, kc, 1, O, kc, P, NULL, 0);
    }
    trim();
    Py_END_ALLOW_THREADS
    if (rc)
        return PyErr_NoMemory();
    Py_RETURN_NONE;
}

/* col2im(cols, dx, ...): dx (NHWC, zeroed here) = the sum of each patch row back onto its pixels, rows in
 * increasing p, within a row (kh, kw) in increasing order: each element a fixed sequence of additions. */
static PyObject *py_col2im(PyObject *self, PyObject *args) {
    unsigned long long ca, xa;
    Py_ssize_t N, H, W, C, KH, KW, PH, PW, SH, SW, OH, OW;
    if (!PyArg_ParseTuple(args, "KKnnnnnnnnnnnn", &ca, &xa, &N, &H, &W, &C, &KH, &KW, &PH, &PW, &SH, &SW, &OH, &OW))
        return NULL;
    const float *cols = (const float *)(uintptr_t)ca;
    float *x = (float *)(uintptr_t)xa;
    Py_BEGIN_ALLOW_THREADS
    Py_ssize_t kc = KH * KW * C;
    memset(x, 0, (size_t)(N * H * W * C) * sizeof(float));
    for (Py_ssize_t n = 0; n < N; n++)
        for (Py_ssize_t oh = 0; oh < OH; oh++)
            for (Py_ssize_t ow = 0; ow < OW; ow++) {
                const float *row = cols + ((n * OH + oh) * OW + ow) * kc;
                for (Py_ssize_t i = 0; i < KH; i++) {
                    Py_ssize_t h = oh * SH - PH + i;
                    if (h < 0 || h >= H)
                        continue;
                    for (Py_ssize_t j = 0; j < KW; j++) {
                        Py_ssize_t w = ow * SW - PW + j;
                        if (w < 0 || w >= W)
                            continue;
                        const float *src = row + (i * KW + j) * C;
                        float *dst = x + ((n * H + h) * W + w) * C;
                        for (Py_ssize_t c = 0; c < C; c++)
                            dst[c] += src[c];
                    }
                }
            }
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/* colsum(a, out, M, N): out[n] = ((0 + a[0][n]) + a[1][n]) + ... + a[M-1][n], a row-major M×N. */
static PyObject *py_colsum(PyObject *self, PyObject *args) {
    unsigned long long aa, oa;
    Py_ssize_t M, N;
    if (!PyArg_ParseTuple(args, "KKnn", &aa, &oa, &M, &N))
        return NULL;
    const float *a = (const float *)(uintptr_t)aa;
    float *out = (float *)(uintptr_t)oa;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t n = 0; n < N; n++)
        out[n] = 0.0f;
    for (Py_ssize_t m = 0; m < M; m++)
        for (Py_ssize_t n = 0; n < N; n++)
            out[n] += a[m * N + n];
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/* set_path("avx2" | "scalar") -> the path now in use ("scalar" where the host has no AVX2+FMA). */
static PyObject *py_set_path(PyObject *self, PyObject *args) {
    const char *name;
    if (!PyArg_ParseTuple(args, "s", &name))
        return NULL;
    if (strcmp(name, "scalar") == 0)
        use_avx2 = 0;
    else if (strcmp(name, "avx2") == 0)
        use_avx2 = host_has_avx2_fma();
    else {
        PyErr_Format(PyExc_ValueError, "unknown kernel path %R: choose avx2 or scalar", PyTuple_GET_ITEM(args, 0));
        return NULL;
    }
    return PyUnicode_FromString(use_avx2 ? "avx2" : "scalar");
}

static PyMethodDef methods[] = {
    {"gemm", py_gemm, METH_VARARGS, "gemm(a, ars, acs, b, brs, bcs, c, ldc, M, N, K, init): C = A·B (+init), fixed order"},
    {"im2col", py_im2col, METH_VARARGS, "im2col(x, cols, N, H, W, C, KH, KW, PH, PW, SH, SW, OH, OW), NHWC"},
    {"conv", py_conv, METH_VARARGS, "conv(x, w, init, out, O, geometry...): patches(x)·wᵀ (+init)"},
    {"conv_wgrad", py_conv_wgrad, METH_VARARGS, "conv_wgrad(x, d, dw, O, geometry...): dᵀ·patches(x)"},
    {"col2im", py_col2im, METH_VARARGS, "col2im(cols, dx, N, H, W, C, KH, KW, PH, PW, SH, SW, OH, OW), NHWC"},
    {"colsum", py_colsum, METH_VARARGS, "colsum(a, out, M, N): column sums in increasing row order"},
    {"set_path", py_set_path, METH_VARARGS, "set_path('avx2' | 'scalar') -> the path in use"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_gemm", NULL, -1, methods};

PyMODINIT_FUNC PyInit__gemm(void) {
    use_avx2 = host_has_avx2_fma();
    return PyModule_Create(&module);
}
