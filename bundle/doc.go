// Package bundle builds, verifies and ships kforge's offline bundle: the Kubernetes binaries,
// CNI plugins and container image archives a cluster needs, built from Go modules with the
// local Go toolchain and written without a registry or container engine.
//
// Built binaries are cached per component and version under $KFORGE_CACHE_DIR (default
// /var/cache/kforge), so only the first build of a version pays for compiling.
package bundle
