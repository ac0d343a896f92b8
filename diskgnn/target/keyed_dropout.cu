// keep_mask: which elements dropout keeps, keyed by each row's stream position (keyed_dropout.py; the same
// draws as native/dropout.h's dropout_pair). One thread an element, grid-strided; rows of `width` elements. The
// key is read from device memory, so that a captured step's replays draw each batch's own masks.
#include <cstdint>

extern "C" __global__ void keep_mask(const long long* __restrict__ bases, long long n, long long width,
                                     const long long* __restrict__ key_at, unsigned int threshold,
                                     bool* __restrict__ out) {
  const unsigned long long key = static_cast<unsigned long long>(*key_at);
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    const unsigned long long pos = static_cast<unsigned long long>(bases[i / width] + i % width);
    unsigned long long z = key + (pos >> 1) * 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const unsigned int draw = (pos & 1) ? static_cast<unsigned int>(z >> 32) : static_cast<unsigned int>(z);
    out[i] = draw >= threshold;
  }
}
