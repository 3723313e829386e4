/**
 * The canonical JSON form the outbox test vectors compare (clients/outbox/README.md):
 * object keys sorted by UTF-16 code units, no whitespace, strings escaped as
 * `JSON.stringify` escapes them (`"`, `\`, control characters; everything else raw),
 * encoded as UTF-8. For documents of objects and strings, as a DynamoDB Put is, this is
 * RFC 8785 (JCS).
 */
export function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) {
    return `[${value.map(canonicalJson).join(",")}]`;
  }
  if (value !== null && typeof value === "object") {
    const entries = Object.keys(value as Record<string, unknown>)
      .sort()
      .map((k) => `${JSON.stringify(k)}:${canonicalJson((value as Record<string, unknown>)[k])}`);
    return `{${entries.join(",")}}`;
  }
  const text = JSON.stringify(value);
  if (text === undefined) {
    throw new TypeError(`${typeof value} has no JSON form`);
  }
  return text;
}
