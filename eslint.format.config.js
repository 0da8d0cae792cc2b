// The formatter: dprint, run as an ESLint rule through @effect/eslint-plugin, the way Effect's own repo
// formats. `npm run format` rewrites the tree, `npm run format:check` (CI) fails on any file it would change.
// No type information is needed, so this runs apart from the type-aware lint (eslint.config.js).
import effect from "@effect/eslint-plugin"
import tseslint from "typescript-eslint"

/** dprint's TypeScript options, matched to the style the code was first written in. */
export const dprint = {
  indentWidth: 2,
  lineWidth: 120,
  semiColons: "asi",
  quoteStyle: "alwaysDouble",
  trailingCommas: "never",
  operatorPosition: "maintain",
  "arrowFunction.useParentheses": "force"
}

export default [
  { ignores: ["dist/", "node_modules/", ".bench-tmp/", ".switchyard-chat/", "**/*.d.ts"] },
  {
    files: ["**/*.ts", "**/*.js", "**/*.mjs"],
    languageOptions: { parser: tseslint.parser },
    linterOptions: { reportUnusedDisableDirectives: "off" },
    // typescript-eslint's rules are known here only so that a disable comment naming one is not an error
    plugins: { "@effect": effect, "@typescript-eslint": tseslint.plugin },
    rules: { "@effect/dprint": ["error", { config: dprint }] }
  }
]
