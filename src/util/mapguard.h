/*
 * mapguard.h - turns a bus error on a file mapping into an error the caller
 * can report.
 *
 * A read through a MAP_SHARED or MAP_PRIVATE file mapping faults with
 * SIGBUS when the page lies past the current end of the file: the file was
 * truncated (or replaced in place by a shorter one) after it was mapped.
 * Left alone, the process dies with "Bus error". A guarded mapping instead
 * gets a page of zeros mapped over the faulting page (so the access, and
 * whatever computation it belongs to, completes on zeros) and a flag set,
 * which the owner checks after the computation and reports as an error;
 * the computation's results must then be discarded. This works from any
 * thread (no longjmp across the thread pool). A SIGBUS outside every
 * guarded range keeps its default action (the process dies as before).
 *
 * Linux only: the handler replaces the page with mmap(MAP_FIXED), which
 * POSIX does not list as async-signal-safe but Linux implements as a plain
 * system call.
 */
#ifndef MS_UTIL_MAPGUARD_H
#define MS_UTIL_MAPGUARD_H

#include <stdbool.h>
#include <stddef.h>

#define MS_MAPGUARD_SLOTS 32 /* mappings guarded at once, per process */

/* Guards [addr, addr + len) (page-aligned start, as mmap returns).
 * Installs the SIGBUS handler when it is not installed (first use, or
 * replaced since; the replaced action still gets faults outside the guarded
 * ranges). Returns a slot >= 0, or -1 when
 * every slot is taken or the handler cannot be installed (the mapping is
 * then unguarded: faults kill the process as before). */
int ms_mapguard_add(const void *addr, size_t len);
/* Stops guarding a slot (before munmap). slot < 0 is ignored. */
void ms_mapguard_remove(int slot);
/* Whether a read of the slot's range faulted since it was added. */
bool ms_mapguard_faulted(int slot);

#endif
