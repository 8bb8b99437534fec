// The CUDA C++ baseline of warpalloc's GPU check: the same cases with the CUDA
// runtime's own device malloc/free (its heap raised so that it can compete),
// plus the atomics ceiling of any bitfield allocator. Prints one JSON object
// per line. Built on the GPU machine by run.sh: nvcc -O3 -arch=sm_90.
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <cuda_runtime.h>

#define CHECK(call)                                                            \
  do {                                                                         \
    cudaError_t e_ = (call);                                                   \
    if (e_ != cudaSuccess) {                                                   \
      fprintf(stderr, "CUDA error %s at %s:%d: %s\n", #call, __FILE__,        \
              __LINE__, cudaGetErrorString(e_));                               \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

__device__ unsigned long long d_nulls, d_bad, d_allocs;

// Per-thread allocate-then-free, `rounds` times (the published benchmark's
// basic case).
__global__ void alloc_free(unsigned size, unsigned rounds) {
  unsigned me = blockIdx.x * blockDim.x + threadIdx.x;
  unsigned long long ok = 0, nulls = 0, bad = 0;
  for (unsigned r = 0; r < rounds; ++r) {
    unsigned *p = (unsigned *)malloc(size < 4 ? 4 : size);
    if (!p) { ++nulls; continue; }
    unsigned word = me ^ (r * 0x9e3779b9u);
    *(volatile unsigned *)p = word;
    if (*(volatile unsigned *)p != word) ++bad;
    free(p);
    ++ok;
  }
  atomicAdd(&d_allocs, ok);
  atomicAdd(&d_nulls, nulls);
  atomicAdd(&d_bad, bad);
}

__device__ unsigned mix(unsigned x) {
  x ^= x >> 16; x *= 0x7feb352du; x ^= x >> 15; x *= 0x846ca68bu; x ^= x >> 16;
  return x;
}

// Mixed sizes 16 B - 8 KiB, log-uniform, a word written and checked per block.
__global__ void mixed(unsigned rounds, unsigned seed) {
  unsigned me = blockIdx.x * blockDim.x + threadIdx.x;
  unsigned long long ok = 0, nulls = 0, bad = 0;
  unsigned s = mix(seed ^ me) | 1;
  for (unsigned r = 0; r < rounds; ++r) {
    s = mix(s + r);
    unsigned octave = 4 + s % 10;
    unsigned size = (1u << (octave - 1)) + (mix(s) % (1u << (octave - 1)));
    if (size > 8192) size = 8192;
    unsigned *p = (unsigned *)malloc(size);
    if (!p) { ++nulls; continue; }
    p[0] = s; p[size / 4 - 1] = ~s;
    if (p[0] != s || p[size / 4 - 1] != ~s) ++bad;
    free(p);
    ++ok;
  }
  atomicAdd(&d_allocs, ok);
  atomicAdd(&d_nulls, nulls);
  atomicAdd(&d_bad, bad);
}

// The ceiling: random-address atomicOr over a bitfield of `words` words, and
// same-address atomicAdd, `rounds` per thread.
__global__ void ceiling_or(unsigned *bits, unsigned words, unsigned rounds) {
  unsigned s = mix(blockIdx.x * blockDim.x + threadIdx.x) | 1;
  unsigned acc = 0;
  for (unsigned r = 0; r < rounds; ++r) {
    s = mix(s + r);
    acc ^= atomicOr(&bits[s % words], 1u << (s >> 27));
  }
  if (acc == 0x12345678u) bits[0] = acc;
}

__global__ void ceiling_add(unsigned long long *counter, unsigned rounds) {
  for (unsigned r = 0; r < rounds; ++r) atomicAdd(counter, 1ull);
}

static unsigned long long read_counter(const void *sym) {
  unsigned long long v = 0;
  CHECK(cudaMemcpyFromSymbol(&v, sym, sizeof v));
  return v;
}

static void reset_counters() {
  unsigned long long z = 0;
  CHECK(cudaMemcpyToSymbol(d_nulls, &z, sizeof z));
  CHECK(cudaMemcpyToSymbol(d_bad, &z, sizeof z));
  CHECK(cudaMemcpyToSymbol(d_allocs, &z, sizeof z));
}

// Times `launch` with events: returns milliseconds of the second run (the
// first warms up), after checking the launch.
template <typename F> static float timed(F launch) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  float best = 0;
  for (int i = 0; i < 2; ++i) {
    reset_counters();
    CHECK(cudaEventRecord(a));
    launch();
    CHECK(cudaGetLastError());
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    CHECK(cudaEventElapsedTime(&best, a, b));
  }
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  return best;
}

// One case per run, so that run.sh gives each its own time limit and a slow
// case loses only its own row:
//   baseline ceiling                  the atomics ceiling (run first)
//   baseline alloc_free THREADS SIZE  CUDA malloc/free pairs
//   baseline mixed                    mixed sizes, 1M threads
static void device_line(size_t heap) {
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  printf("{\"case\":\"device\",\"name\":\"%s\",\"sms\":%d,\"malloc_heap_bytes\":%zu}\n", prop.name,
         prop.multiProcessorCount, heap);
  fflush(stdout);
}

int main(int argc, char **argv) {
  const size_t heap = size_t(8) << 30;
  const unsigned block = 256, rounds = 4, most = 1048576;
  const char *which = argc > 1 ? argv[1] : "";
  if (!strcmp(which, "ceiling")) {
    device_line(heap);
    unsigned words = 1u << 24, t = most, blocks = (t + block - 1) / block, r = 64;
    unsigned *bits;
    unsigned long long *counter;
    CHECK(cudaMalloc(&bits, size_t(words) * 4));
    CHECK(cudaMemset(bits, 0, size_t(words) * 4));
    CHECK(cudaMalloc(&counter, 8));
    float ms = timed([&] { ceiling_or<<<blocks, block>>>(bits, words, r); });
    double ops = double(blocks) * block * r;
    printf("{\"case\":\"ceiling\",\"op\":\"random atomicOr\",\"threads\":%u,\"ms\":%.4f,\"ops_per_second\":%.1f}\n",
           blocks * block, ms, ops / (ms / 1e3));
    fflush(stdout);
    ms = timed([&] { ceiling_add<<<blocks, block>>>(counter, r); });
    printf("{\"case\":\"ceiling\",\"op\":\"same-address atomicAdd\",\"threads\":%u,\"ms\":%.4f,\"ops_per_second\":%.1f}\n",
           blocks * block, ms, ops / (ms / 1e3));
    CHECK(cudaFree(bits));
    CHECK(cudaFree(counter));
    return 0;
  }
  CHECK(cudaDeviceSetLimit(cudaLimitMallocHeapSize, heap));
  if (!strcmp(which, "alloc_free") && argc == 4) {
    unsigned t = unsigned(strtoul(argv[2], nullptr, 10)), size = unsigned(strtoul(argv[3], nullptr, 10));
    unsigned blocks = (t + block - 1) / block;
    float ms = timed([&] { alloc_free<<<blocks, block>>>(size, rounds); });
    unsigned long long allocs = read_counter(&d_allocs), nulls = read_counter(&d_nulls),
                       bad = read_counter(&d_bad);
    printf("{\"case\":\"alloc_free\",\"impl\":\"cuda_malloc\",\"threads\":%u,\"size\":%u,\"ms\":%.4f,"
           "\"pairs\":%llu,\"nulls\":%llu,\"bad\":%llu,\"pairs_per_second\":%.1f}\n",
           blocks * block, size, ms, allocs, nulls, bad, allocs / (ms / 1e3));
    return 0;
  }
  if (!strcmp(which, "mixed")) {
    unsigned blocks = (most + block - 1) / block;
    float ms = timed([&] { mixed<<<blocks, block>>>(rounds, 7); });
    unsigned long long allocs = read_counter(&d_allocs), nulls = read_counter(&d_nulls),
                       bad = read_counter(&d_bad);
    printf("{\"case\":\"mixed\",\"impl\":\"cuda_malloc\",\"threads\":%u,\"ms\":%.4f,\"pairs\":%llu,"
           "\"nulls\":%llu,\"bad\":%llu,\"pairs_per_second\":%.1f}\n",
           blocks * block, ms, allocs, nulls, bad, allocs / (ms / 1e3));
    return 0;
  }
  fprintf(stderr, "usage: baseline ceiling | alloc_free THREADS SIZE | mixed\n");
  return 2;
}
