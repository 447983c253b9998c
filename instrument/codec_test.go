package instrument

// stringCodec is a Codec whose results are JSON documents held in strings;
// an isError result is one starting with the marker "!".
type stringCodec struct{}

func (stringCodec) Marshal(r *string) ([]byte, error) {
	if r == nil {
		return nil, errNilResult
	}
	return []byte(*r), nil
}

func (stringCodec) Unmarshal(b []byte) (*string, error) {
	s := string(b)
	return &s, nil
}

func (stringCodec) IsError(r *string) bool    { return r != nil && len(*r) > 0 && (*r)[0] == '!' }
func (stringCodec) NeedsInput(r *string) bool { return r != nil && *r == "?" }

func (stringCodec) ErrorResult(text string) *string {
	s := "!" + text
	return &s
}

func (stringCodec) WithMeta(r *string, key string, value any) *string {
	s := *r + "|" + key
	return &s
}

type testError string

func (e testError) Error() string { return string(e) }

const errNilResult = testError("nil result")
