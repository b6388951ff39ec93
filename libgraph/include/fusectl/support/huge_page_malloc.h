// Backing malloc with transparent huge pages, for programs that build million-node graphs.
//
// A million-node graph is a few GB of small objects. With 4 KiB pages the kernel takes a page
// fault for every 4 KiB the first time it is touched, and on the 2-core VMs we measure on those
// faults were a third of load time: loading and saving a 1M-node model took 13.3 s with
// ordinary pages and 7.8 s with glibc's malloc on huge pages (bench/run_io_bench.sh).
// glibc reads that setting (GLIBC_TUNABLES=glibc.malloc.hugetlb=1) only at program start, so
// the program has to be started again with it.
#pragma once

namespace fusectl {

// Call first thing in main(), with main's argv. Re-executes the program once (same argv, same
// open files) with GLIBC_TUNABLES=glibc.malloc.hugetlb=1 plus a 64 MiB heap growth step
// (top_pad), no trimming of freed memory below 4 GiB (trim_threshold) and a 32 MiB
// mmap_threshold, unless GLIBC_TUNABLES is already set (the user's tunables win),
// FUSECTL_NO_HUGE_PAGES is set, transparent huge pages are disabled ("never"), a sanitizer
// allocator replaces malloc (ASan, TSan, MSan builds), or this is not
// Linux with glibc. Returns normally in all those cases, and when the re-execution itself fails;
// without a user's GLIBC_TUNABLES the three heap settings are then applied with mallopt().
void restartWithHugePageMalloc(char** argv);

}  // namespace fusectl
