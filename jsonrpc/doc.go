// Package jsonrpc reads the Supervaizer v2 JSON-RPC envelope that Studio posts
// to an agent's /a2a controller and writes JSON-RPC error answers shaped as the
// Python SDK writes them.
//
// Parse takes the raw request body once and returns a Call (method, action or
// surface request fields) or a *refusal.Refusal carrying the JSON-RPC code. It refuses
// whatever a Python agent could read differently from a Go proxy: invalid
// UTF-8, a UTF-8 BOM, non-JSON extensions (NaN, comments), trailing data,
// batches, and JSON that is not strict (package strictjson states the rules:
// duplicate object keys at any depth, nesting deeper than MaxDepth, lone
// surrogate escapes).
//
// The members Parse reads are listed once, in scan.go: envelopeFields and
// requestFields (path, the SDK model's rule, where the value goes in the
// Call); one strictjson.Scan of the body checks the JSON grammar, UTF-8
// and the rules and records where each value lies (a body it finds a
// problem with is read again check by check, to name the first problem).
//
// Source: docs/sdk-wire.md, "JSON-RPC messages" (the envelope model and the
// request models).
//
// The package has no Caddy or net/http handler dependency.
package jsonrpc
