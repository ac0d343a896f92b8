// Zero-copy row gather (PyTorch-Direct): the GPU reads a batch's rows straight out of page-locked host memory
// mapped into its address space (cudaHostRegister with cudaHostRegisterMapped; under UVA the host pointer is
// the device pointer) and writes them into device memory, with no CPU gather and no staging copy.
//
// Compiled at run time by CuPy (NVRTC) from diskgnn/store/uva.py, and by nvcc in `make test` where nvcc is
// installed, so that it cannot rot on machines without a GPU. Self-contained: NVRTC has no standard headers.
//
// Each read of host memory is a round trip over PCIe, so what decides the speed is how many are in flight:
// a warp takes ROWS rows at a time and every lane issues its loads of all of them before any store, in
// 16-byte words where the rows and both bases allow (4-byte words, else bytes, otherwise). Rows are strided
// over the grid; the caller sorts the slots first, so neighbouring warps read neighbouring host rows.

typedef unsigned long long u64;
typedef long long i64;

struct alignas(16) word16 {
    unsigned int a, b, c, d;
};

#define ROWS 4

template <typename Word>
__device__ __forceinline__ void copy_rows(const unsigned char* __restrict__ table, const i64* __restrict__ slots,
                                          const i64* __restrict__ positions, i64 first, i64 n, i64 row_bytes,
                                          unsigned char* __restrict__ out, int lane) {
    const i64 words = row_bytes / static_cast<i64>(sizeof(Word));
    const Word* src[ROWS];
    Word* dst[ROWS];
    int rows = 0;
#pragma unroll
    for (int r = 0; r < ROWS; ++r) {
        if (first + r < n) {
            src[r] = reinterpret_cast<const Word*>(table + slots[first + r] * row_bytes);
            dst[r] = reinterpret_cast<Word*>(out + positions[first + r] * row_bytes);
            rows = r + 1;
        }
    }
    for (i64 k = lane; k < words; k += 32) {
        Word v[ROWS];
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            if (r < rows) v[r] = src[r][k];
        }
#pragma unroll
        for (int r = 0; r < ROWS; ++r) {
            if (r < rows) dst[r][k] = v[r];
        }
    }
}

// out[positions[i]] = table[slots[i]] for i < n; rows of row_bytes bytes.
extern "C" __global__ void gather_rows(const unsigned char* __restrict__ table, const i64* __restrict__ slots,
                                       const i64* __restrict__ positions, i64 n, i64 row_bytes,
                                       unsigned char* __restrict__ out) {
    const int lane = threadIdx.x & 31;
    const i64 warp = (static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
    const i64 warps = (static_cast<i64>(gridDim.x) * blockDim.x) >> 5;
    const u64 bases = reinterpret_cast<u64>(table) | reinterpret_cast<u64>(out);
    const bool wide = (row_bytes & 15) == 0 && (bases & 15) == 0;
    const bool word = (row_bytes & 3) == 0 && (bases & 3) == 0;
    for (i64 first = warp * ROWS; first < n; first += warps * ROWS) {
        if (wide) {
            copy_rows<word16>(table, slots, positions, first, n, row_bytes, out, lane);
        } else if (word) {
            copy_rows<unsigned int>(table, slots, positions, first, n, row_bytes, out, lane);
        } else {
            copy_rows<unsigned char>(table, slots, positions, first, n, row_bytes, out, lane);
        }
    }
}
