/* The floor under a cached 4 KiB read (docs/bench.md, "Warm reads"): the
 * time of one memcpy of 4 KiB, and of summing 4 KiB, from random
 * page-aligned places of a buffer of REGION MiB, p50 and p99 of 200000.
 * gcc -O2 memcpy_floor.c -o memcpy_floor && ./memcpy_floor [REGION_MIB, default 128] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <stdint.h>
static inline uint64_t ns(){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1000000000ull+t.tv_nsec;}
int cmp(const void*a,const void*b){uint64_t x=*(uint64_t*)a,y=*(uint64_t*)b;return x<y?-1:x>y;}
int main(int argc,char**argv){
  size_t region=(size_t)(argc>1?atol(argv[1]):128)<<20; int N=200000;
  char*a=aligned_alloc(4096,region); memset(a,1,region);
  /* The copy lands in memory the compiler must assume is read afterwards
   * (the empty asm takes its address and clobbers memory): a local array
   * of which one byte is read lets gcc drop most of the copy. */
  char*dst=aligned_alloc(64,4096);
  uint64_t*t=malloc(N*8), *t2=malloc(N*8); uint64_t sum=0; unsigned s=1;
  for(int i=0;i<N;i++){s=s*1103515245+12345; size_t p=((size_t)(s>>4)%(region/4096))*4096;
    uint64_t t0=ns(); memcpy(dst,a+p,4096); __asm__ volatile(""::"r"(dst):"memory"); sum+=dst[100]; uint64_t t1=ns(); t[i]=t1-t0;
    s=s*1103515245+12345; p=((size_t)(s>>4)%(region/4096))*4096;
    t0=ns(); const uint64_t*q=(const uint64_t*)(a+p); uint64_t x=0; for(int k=0;k<512;k++) x+=q[k]; sum+=x; t1=ns(); t2[i]=t1-t0;}
  qsort(t,N,8,cmp); qsort(t2,N,8,cmp);
  printf("region %zu MiB: memcpy 4K p50 %lu ns p99 %lu; sum-read 4K p50 %lu ns p99 %lu (%lu)\n",region>>20,t[N/2],t[N*99/100],t2[N/2],t2[N*99/100],sum&1);
}
