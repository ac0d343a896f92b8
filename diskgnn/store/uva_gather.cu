// Zero-copy row gather (PyTorch-Direct): the GPU reads a batch's rows straight out of page-locked host memory
// mapped into its address space (cudaHostRegister with cudaHostRegisterMapped; under UVA the host pointer is
// the device pointer) and writes them into device memory, with no CPU gather and no staging copy.
//
// Compiled at run time by CuPy (NVRTC) from diskgnn/store/uva.py, and by nvcc in `make test` where nvcc is
// installed, so that it cannot rot on machines without a GPU. Self-contained: NVRTC has no standard headers.
//
// One warp per row, rows strided over the grid so that many rows are in flight at once (each is a round trip
// over PCIe); within a row the lanes move 16-byte words where the row and both bases allow, else 4-byte
// words, else bytes. The caller sorts the slots first, so neighbouring warps read neighbouring host rows.

typedef unsigned long long u64;
typedef long long i64;

struct alignas(16) word16 {
    unsigned int a, b, c, d;
};

template <typename Word>
__device__ __forceinline__ void copy_row(const unsigned char* __restrict__ src, unsigned char* __restrict__ dst,
                                         i64 words, int lane) {
    const Word* s = reinterpret_cast<const Word*>(src);
    Word* d = reinterpret_cast<Word*>(dst);
    for (i64 k = lane; k < words; k += 32) d[k] = s[k];
}

// out[positions[i]] = table[slots[i]] for i < n; rows of row_bytes bytes.
extern "C" __global__ void gather_rows(const unsigned char* __restrict__ table, const i64* __restrict__ slots,
                                       const i64* __restrict__ positions, i64 n, i64 row_bytes,
                                       unsigned char* __restrict__ out) {
    const int lane = threadIdx.x & 31;
    const i64 first = (static_cast<i64>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
    const i64 stride = (static_cast<i64>(gridDim.x) * blockDim.x) >> 5;
    const u64 bases = reinterpret_cast<u64>(table) | reinterpret_cast<u64>(out);
    const bool wide = (row_bytes & 15) == 0 && (bases & 15) == 0;
    const bool word = (row_bytes & 3) == 0 && (bases & 3) == 0;
    for (i64 i = first; i < n; i += stride) {
        const unsigned char* src = table + slots[i] * row_bytes;
        unsigned char* dst = out + positions[i] * row_bytes;
        if (wide) {
            copy_row<word16>(src, dst, row_bytes >> 4, lane);
        } else if (word) {
            copy_row<unsigned int>(src, dst, row_bytes >> 2, lane);
        } else {
            copy_row<unsigned char>(src, dst, row_bytes, lane);
        }
    }
}
