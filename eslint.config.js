// ESLint for every TypeScript file of the repo (src, test, bench, examples, scripts), type-aware through
// typescript-eslint's project service (it reads tsconfig.json). `npm run lint` runs it. Formatting is not
// here: eslint.format.config.js holds the formatter (`npm run format`, `npm run format:check`).
import js from "@eslint/js"
import { defineConfig } from "eslint/config"
import tseslint from "typescript-eslint"

export default defineConfig(
  { ignores: ["dist/", "node_modules/", ".bench-tmp/", ".switchyard-chat/", "**/*.d.ts"] },
  {
    files: ["**/*.ts"],
    extends: [js.configs.recommended, tseslint.configs.recommendedTypeChecked],
    languageOptions: {
      parserOptions: {
        projectService: true,
        tsconfigRootDir: import.meta.dirname
      }
    },
    rules: {
      // A promise nobody awaits loses its rejection; one passed where a void callback is expected too.
      "@typescript-eslint/no-floating-promises": "error",
      "@typescript-eslint/no-misused-promises": "error",
      // `import type` for what is only a type (tsconfig has verbatimModuleSyntax: the emit keeps the rest).
      "@typescript-eslint/consistent-type-imports": "error",
      "@typescript-eslint/no-unused-vars": ["error", {
        argsIgnorePattern: "^_",
        varsIgnorePattern: "^_",
        caughtErrorsIgnorePattern: "^_",
        destructuredArrayIgnorePattern: "^_",
        ignoreRestSiblings: true
      }],

      // A `let` that a closure reads before its one assignment (the writer's callbacks see the core built
      // after the writer) cannot become a `const`.
      "prefer-const": ["error", { ignoreReadBeforeAssign: true }],

      // `any` stays allowed, as in Effect's own repo: the queue stores tasks of every type behind one erased
      // shape (`Exit.Exit<any, any>`, `Deferred.Deferred<any, any>`) and Effect types use `any` in their
      // variance positions. Where an `any` value is then used, the no-unsafe-* rules still speak (in src/).
      "@typescript-eslint/no-explicit-any": "off",
      // Off while tsconfig has noUncheckedIndexedAccess: false. Most of what it flags (133 of 154 when it was
      // tried) are `xs[i]!` on indexed reads, which mark the reads a checked index would question; turning
      // the compiler option on is the way to make them count, not deleting them.
      "@typescript-eslint/no-unnecessary-type-assertion": "off",
      // The Promise skin rejects with the task's own error, whatever the task threw (the spec's contract),
      // and an abort rejects with `signal.reason`: those are `unknown` / `any` by nature.
      "@typescript-eslint/prefer-promise-reject-errors": ["error", {
        allowThrowingUnknown: true,
        allowThrowingAny: true
      }]
    }
  },
  {
    // Tests, benchmarks, scripts and examples read JSON and poke at error shapes; the assertions are their
    // type checks. Benchmarks pass `async` functions without an `await` on purpose (an async task is what
    // they measure).
    files: ["test/**/*.ts", "bench/**/*.ts", "scripts/**/*.ts", "examples/**/*.ts"],
    rules: {
      "@typescript-eslint/no-unsafe-argument": "off",
      "@typescript-eslint/no-unsafe-assignment": "off",
      "@typescript-eslint/no-unsafe-call": "off",
      "@typescript-eslint/no-unsafe-member-access": "off",
      "@typescript-eslint/no-unsafe-return": "off",
      "@typescript-eslint/require-await": "off"
    }
  },
  {
    // plain JavaScript (the eslint configs, scripts/prepare.mjs): no type information; Node's globals
    files: ["**/*.js", "**/*.mjs"],
    extends: [js.configs.recommended],
    languageOptions: { globals: { console: "readonly", process: "readonly", URL: "readonly" } }
  }
)
