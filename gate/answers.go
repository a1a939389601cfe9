// Answers the gate writes itself: FastAPI-style {"detail": ...} bodies,
// JSON-RPC bodies, and the detail text of each refusal status.

package gate

import (
	"net/http"
)

// writeDetail writes a FastAPI-style {"detail": "..."} answer.
func writeDetail(w http.ResponseWriter, status int, detail string) error {
	return writeJSON(w, status, map[string]string{"detail": detail})
}

// writeJSONRPC writes a JSON-RPC answer with HTTP 200, as the SDK does.
func writeJSONRPC(w http.ResponseWriter, body []byte) error {
	return writeBody(w, http.StatusOK, body)
}

// writeBody writes a JSON body with its status and length.
func writeBody(w http.ResponseWriter, status int, body []byte) error {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", itoa(len(body)))
	w.WriteHeader(status)
	_, err := w.Write(body)
	return err
}

// detailBodyOnRead is the 400 detail of a GET or HEAD with a body, on any
// route (bodyOnRead, /_sidecar/*).
const detailBodyOnRead = "GET and HEAD requests take no body"

// refuseBodyOnRead answers a GET or HEAD that declares a body: 400, and over HTTP/1 the connection is closed after it (the
// body may be a smuggled request: nothing after it on the connection is
// served).
func refuseBodyOnRead(w http.ResponseWriter, r *http.Request) error {
	if r.ProtoMajor == 1 {
		w.Header().Set("Connection", "close")
	}
	return writeDetail(w, http.StatusBadRequest, detailBodyOnRead)
}

func statusDetail(status int) string {
	switch status {
	case http.StatusRequestEntityTooLarge:
		return "Request body too large"
	case http.StatusRequestTimeout:
		return "Request body not received in time"
	case http.StatusUnsupportedMediaType:
		return "Content-Encoding is not supported"
	case http.StatusMethodNotAllowed:
		return "Method Not Allowed"
	}
	return http.StatusText(status)
}
