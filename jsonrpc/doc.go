// Package jsonrpc reads the Supervaizer v2 JSON-RPC envelope that Studio posts
// to an agent's /a2a controller and writes JSON-RPC error answers shaped as the
// Python SDK writes them.
//
// Parse takes the raw request body once and returns a Call (method, action or
// surface request fields) or an *Error carrying the JSON-RPC code. It refuses
// whatever a Python agent could read differently from a Go proxy: invalid
// UTF-8, a UTF-8 BOM, non-JSON extensions (NaN, comments), trailing data,
// batches, nesting deeper than MaxDepth, and duplicate object keys at any
// depth (Python keeps the last value, gjson returns the first).
//
// Source: docs/sdk-wire.md, "JSON-RPC messages" (the envelope model and the
// request models).
//
// The package has no Caddy or net/http handler dependency.
package jsonrpc
