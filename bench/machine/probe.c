// Fixed user-space work timed in thread CPU time (BENCHMARKS.md, "Code, method or machine"): a
// dependent xorshift chain and a 32 MiB memcpy, best of several rounds; a neighbour can slow the
// wall clock but not these figures unless it slows the core itself.
//   gcc -O2 -o probe probe.c && ./probe
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static double cpu(void){struct timespec t;clock_gettime(CLOCK_THREAD_CPUTIME_ID,&t);return t.tv_sec+t.tv_nsec*1e-9;}
int main(){
  double best=1e9; unsigned long x=88172645463325252UL;
  for(int r=0;r<5;r++){double c0=cpu(); for(long i=0;i<50000000;i++){x^=x<<13;x^=x>>7;x^=x<<17;} double c=(cpu()-c0)/50000000*1e9; if(c<best)best=c;}
  size_t sz=32<<20; char*a=malloc(sz),*b=malloc(sz); memset(a,1,sz);memset(b,2,sz); double bm=1e9;
  for(int r=0;r<10;r++){double c0=cpu(); memcpy(b,a,sz); double c=(cpu()-c0)/sz*1e9; if(c<bm)bm=c; a[r]=b[r+1];}
  printf("xorshift %.3f ns/iter (best of 5, thread CPU time); memcpy 32 MiB %.3f ns/byte CPU (%.2f GB/s per CPU-s) [%lu]\n",best,bm,1/bm,x&1);
}
