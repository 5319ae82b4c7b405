/* Dependent random loads over 512 MiB (transparent huge pages requested): the memory latency
 * that bounds a random in-process get, which needs two dependent misses (index slot, record).
 * Build and run: cc -O2 bench/memory-latency.c -o /tmp/memory-latency && /tmp/memory-latency */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

int main(void) {
    const size_t slots = (512UL << 20) / sizeof(size_t);
    const int loads = 10000000;
    size_t *next = mmap(NULL, slots * sizeof(size_t), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (next == MAP_FAILED) return 1;
    madvise(next, slots * sizeof(size_t), MADV_HUGEPAGE);
    for (size_t i = 0; i < slots; i++) next[i] = i;
    srand(1);
    for (size_t i = slots - 1; i > 0; i--) { /* one random cycle through every slot */
        size_t j = ((size_t)rand() * RAND_MAX + rand()) % i;
        size_t t = next[i]; next[i] = next[j]; next[j] = t;
    }
    struct timespec start, end;
    size_t at = 0;
    clock_gettime(CLOCK_MONOTONIC, &start);
    for (int i = 0; i < loads; i++) at = next[at];
    clock_gettime(CLOCK_MONOTONIC, &end);
    double ns = ((end.tv_sec - start.tv_sec) * 1e9 + (end.tv_nsec - start.tv_nsec)) / loads;
    printf("%.1f ns per dependent random load over 512 MiB (%zu)\n", ns, at);
    return 0;
}
