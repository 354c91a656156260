/**
 * Ends the process with status `code` without running the C library's exit handlers.
 *
 * Why: a CLI that ran ranks in Web Workers exits while those worker threads may still be tearing
 * down their WebGPU device. `exit(3)` runs the native libraries' atexit handlers and static
 * destructors (Mesa's driver queues, LLVM) concurrently with that teardown, which now and then
 * corrupts the heap ("corrupted size vs. prev_size", exit 134) after the run has finished and
 * written everything. `_exit(2)` ends every thread at once instead (docs/design.md#runtime-quirks).
 *
 * Before leaving it does what `Deno.exit` does for JavaScript: dispatches `unload` (the worker
 * bundle's temp folder is removed there). Everything the CLIs print goes through synchronous
 * writes, and every file they write is awaited, so nothing is lost. Without the FFI permission
 * (a CLI run without `-A`) it ends through `Deno.exit`.
 */
export function exitProcess(code: number): never {
  dispatchEvent(new Event('unload'));
  let libc: Deno.DynamicLibrary<{ _exit: { parameters: ['i32']; result: 'void' } }> | null = null;
  try {
    libc = Deno.dlopen(Deno.build.os === 'darwin' ? 'libSystem.dylib' : 'libc.so.6', {
      _exit: { parameters: ['i32'], result: 'void' },
    });
  } catch {
    // No FFI permission or no libc by that name: the ordinary exit.
  }
  libc?.symbols._exit(code);
  Deno.exit(code);
}
