/* How a 4 KiB memcpy from random places of a shared buffer scales from one
 * thread to two (docs/bench.md, "Cached 4 KiB reads from two threads").
 * gcc -O2 -pthread memcpy_threads.c -o memcpy_threads
 * ./memcpy_threads 64 1; ./memcpy_threads 64 2   (MiB, threads) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <stdint.h>
#include <pthread.h>
static inline uint64_t ns(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1000000000ull+t.tv_nsec;}
static char*a; static size_t region; static int N=2000000;
static void*run(void*arg){unsigned s=(unsigned)(uintptr_t)arg; char dst[4096] __attribute__((aligned(64))); uint64_t sum=0;
  for(int i=0;i<N;i++){s=s*1103515245+12345; size_t p=((size_t)(s>>4)%(region/4096))*4096; memcpy(dst,a+p,4096); sum+=dst[(i*64)&4095]; __asm__ volatile(""::"r"(dst):"memory");}
  return (void*)(uintptr_t)sum;}
int main(int argc,char**argv){ region=(size_t)(argc>1?atol(argv[1]):128)<<20; int th=argc>2?atoi(argv[2]):1;
  a=aligned_alloc(4096,region); memset(a,1,region); pthread_t t[8];
  uint64_t t0=ns(); for(int i=0;i<th;i++) pthread_create(&t[i],0,run,(void*)(uintptr_t)(i*7+1)); for(int i=0;i<th;i++) pthread_join(t[i],0);
  uint64_t el=ns()-t0; printf("%d threads, %zu MiB: %.3f us per copy per thread, aggregate %.2f M copies/s\n",th,region>>20,(double)el/N/1000,(double)N*th/el*1000);}
