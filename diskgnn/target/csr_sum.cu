// csr_sum: out[i] = the sum of h's rows indices[indptr[i] .. indptr[i + 1]) in the list's order (float32 rows of
// `width`). A warp an output row, its lanes over the columns (a neighbour's row is read as whole 128-byte lines),
// rows grid-strided. The captured step's neighbour sums (csr_sum.py): it allocates nothing, sorts nothing and
// reads nothing back, so a CUDA graph replays it as captured.

extern "C" __global__ void csr_sum(const long long* __restrict__ indptr, const long long* __restrict__ indices,
                                   const float* __restrict__ h, long long rows, long long width,
                                   float* __restrict__ out) {
  const int lane = threadIdx.x & 31;
  const long long warp = (blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x) >> 5;
  const long long warps = (static_cast<long long>(gridDim.x) * blockDim.x) >> 5;
  for (long long i = warp; i < rows; i += warps) {
    const long long begin = indptr[i], end = indptr[i + 1];
    for (long long c = lane; c < width; c += 32) {
      float sum = 0.0f;
      for (long long e = begin; e < end; ++e) sum += h[indices[e] * width + c];
      out[i * width + c] = sum;
    }
  }
}
