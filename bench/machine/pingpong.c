// What a wakeup costs on this machine (BENCHMARKS.md, "Code, method or machine"): two threads
// pinned to cores 0 and OTHER pass one byte back and forth through two pipes, N round trips.
//   gcc -O2 -o pingpong pingpong.c -lpthread && ./pingpong 1 100000
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec+t.tv_nsec*1e-9;}
static void cpu(double*u,double*s){struct rusage r;getrusage(RUSAGE_SELF,&r);*u=r.ru_utime.tv_sec+r.ru_utime.tv_usec*1e-6;*s=r.ru_stime.tv_sec+r.ru_stime.tv_usec*1e-6;}
static void pin(int c){cpu_set_t s;CPU_ZERO(&s);CPU_SET(c,&s);sched_setaffinity(0,sizeof s,&s);}
int a[2],b[2]; int N;
static void* pong(void*x){int c=(int)(long)x; pin(c); char ch; for(int i=0;i<N;i++){read(a[0],&ch,1);write(b[1],&ch,1);}return 0;}
int main(int argc,char**argv){
  int other=atoi(argv[1]); N=argc>2?atoi(argv[2]):200000;
  pipe(a);pipe(b); pin(0); pthread_t th; pthread_create(&th,0,pong,(void*)(long)other);
  double u0,s0,u1,s1; char ch='x'; double t0=now(); cpu(&u0,&s0);
  for(int i=0;i<N;i++){write(a[1],&ch,1);read(b[0],&ch,1);} pthread_join(th,0);
  double w=now()-t0; cpu(&u1,&s1);
  printf("pipe ping-pong, threads on cores 0 and %d: %.2f us wall, %.2f us user, %.2f us system per round trip (2 wakeups)\n",other,w/N*1e6,(u1-u0)/N*1e6,(s1-s0)/N*1e6);
}
