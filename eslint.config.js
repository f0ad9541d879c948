// @ts-check
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['node_modules/', 'data/', 'drizzle/', 'coverage/', 'eslint.config.js', 'bin/', 'dist/', 'web/src/api/schema.d.ts'] },
  js.configs.recommended,
  ...tseslint.configs.strictTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      '@typescript-eslint/restrict-template-expressions': ['error', { allowNumber: true }],
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/no-extraneous-class': 'off',
      '@typescript-eslint/no-confusing-void-expression': 'off',
    },
  },
  {
    files: ['src/**/*.ts'],
    rules: {
      // On Node 20 an AsyncLocalStorage (or any async hook) turns on the promise hooks for every
      // promise in the process: 10-30% of every route's throughput (platform/request-scope.ts).
      'no-restricted-imports': ['error', { paths: [
        { name: 'node:async_hooks', message: 'Async hooks slow every promise on Node 20: pass the request (requestLog, platform/request-scope.ts).' },
        { name: 'async_hooks', message: 'Async hooks slow every promise on Node 20: pass the request (requestLog, platform/request-scope.ts).' },
        { name: 'hono/context-storage', message: 'It is an AsyncLocalStorage: pass the request instead (platform/request-scope.ts).' },
      ] }],
    },
  },
  {
    files: ['**/*.test.ts', 'test/**/*.ts', 'bench/**/*.ts'],
    rules: {
      '@typescript-eslint/no-non-null-assertion': 'off',
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
      '@typescript-eslint/no-unsafe-return': 'off',
      '@typescript-eslint/no-explicit-any': 'off',
      '@typescript-eslint/no-unnecessary-condition': 'off',
    },
  },
  {
    // Plain ES modules shared with child processes (test/setup/loopback-guard.mjs): linted without types.
    files: ['**/*.mjs'],
    extends: [tseslint.configs.disableTypeChecked],
    languageOptions: { parserOptions: { projectService: false, project: null }, globals: { process: 'readonly' } },
  },
);
