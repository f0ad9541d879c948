# syntax=docker/dockerfile:1
#
# Keel's container image (docs/deploy.md, "Container image"). Three stages:
#   deps     `npm ci --omit=dev`: the production packages, without install scripts
#   console  the web console (web/, Vite) built into /app/console
#   runtime  the production packages, the sources the launcher fingerprints, the server bundle
#            built in place, the console, a non-root user; no secret anywhere
#
#   docker build -t keel .
#   docker run --rm -p 3000:3000 -v keel-data:/data \
#     -e APP_ENCRYPTION_KEY=… -e JWT_SECRET=… -e PUBLIC_URL=https://id.example.com keel
#   docker run … keel worker          # the same image runs every role (serve, worker, migrate, admin)
#
# Nothing here downloads a browser or a binary of its own: every package comes from the lockfile
# (native ones as npm's prebuilt optional packages), and install scripts are off (the only ones in
# the production tree are esbuild's binary check and @scarf/scarf's download counter).

ARG NODE_VERSION=24

# ---- deps: production packages only -------------------------------------------------------------
FROM node:${NODE_VERSION}-bookworm-slim AS deps
ENV NPM_CONFIG_UPDATE_NOTIFIER=false NPM_CONFIG_FUND=false NPM_CONFIG_AUDIT=false SCARF_ANALYTICS=false
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev --ignore-scripts && npm cache clean --force

# ---- console: the web console, built once with React's production build --------------------------
FROM deps AS console
COPY bin ./bin
COPY web ./web
# bin/console.js builds into dist/console/<fingerprint>/; the image serves it from a fixed folder.
RUN node bin/console.js \
 && set -- dist/console/*/index.html && test "$#" -eq 1 && test -f "$1" \
 && mv "$(dirname "$1")" /app/console-build

# ---- runtime ---------------------------------------------------------------------------------------
FROM deps AS runtime
# What `node bin/keel.js` reads at run time: package.json (version, project root), drizzle/ (the
# migrations), bin/ (the launcher), src/ and node_modules/.package-lock.json (the launcher's
# fingerprint of the bundle: it rebuilds dist/ when they change, so they must be the very files the
# bundle below was built from), tsconfig.json (read by esbuild while bundling).
COPY package.json tsconfig.json ./
COPY drizzle ./drizzle
COPY bin ./bin
COPY src ./src
# The server bundle, built here against these exact files: the launcher finds it current at start
# and never writes to dist/ (which the runtime user cannot write).
RUN node bin/build.js
COPY --from=console /app/console-build ./console

# The embedded database's data directory (unused on PostgreSQL except for BINARY_SOURCE=local
# uploads); mount a volume here.
RUN mkdir -p /data && chown node:node /data

ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=3000 \
    DATA_DIR=/data \
    CONSOLE_DIR=/app/console

USER node
EXPOSE 3000
# Liveness: /health answers while the process serves and its database answers. Load balancers use
# /health/ready instead (it also checks Redis). No curl in the slim image: node fetches it.
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.PORT || 3000) + '/health').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
# SIGTERM (docker stop) stops each role gracefully; give it more than WEBHOOK_TIMEOUT_MS (30 s):
# `docker run --stop-timeout 45`, compose `stop_grace_period: 45s`.
STOPSIGNAL SIGTERM
ENTRYPOINT ["node", "bin/keel.js"]
CMD ["serve"]
