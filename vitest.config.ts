import { defineConfig } from "vitest/config"

export default defineConfig({
  test: {
    include: ["test/**/*.test.ts"],
    testTimeout: 30_000,
    hookTimeout: 30_000,
    // Crash tests spawn real child processes; keep the pool small on 2-core machines.
    maxWorkers: 2,
    // A worker runs its files one after another in one process and keeps their modules: effect and
    // src/ load once per worker instead of once per file (a fresh process and ~0.5-1 s of imports for
    // each of ~100 files). So a test file must not count on fresh module state: what it changes
    // globally (fake timers, process listeners, a metric registry) it restores or provides itself.
    isolate: false,
    // Compiles src/, examples/, scripts/ and test/ to JavaScript once per run, so a test's child process
    // (the chatbot, a runner, a crash fixture) runs plain `node` on this run's sources instead of
    // loading every module through tsx's hooks (see test/support/compileOnce.ts and node.ts).
    globalSetup: ["test/support/compileOnce.ts"]
  }
})
