/** The check of a webhook URL, on its own (no imports): the chatbot runs it before anything loads. */

/** A URL as it may be shown in a message: a password and a query string (maybe secrets) masked. */
export const shownUrl = (url: string): string => {
  if (!URL.canParse(url)) return url
  const shown = new URL(url)
  if (shown.password === "" && shown.search === "") return url
  if (shown.password !== "") shown.password = "***"
  if (shown.search !== "") shown.search = "?..."
  return shown.href
}

/**
 * Checks a webhook URL: the parsed URL, or a one-line reason in p-queue's tone
 * ("Expected `url` to be an http or https URL, got `ftp://x`"), the URL shown by {@link shownUrl}.
 */
export const parseWebhookUrl = (url: unknown, field = "url"): URL | string => {
  const expected = `Expected \`${field}\` to be an http or https URL, got \`${
    typeof url === "string" ? shownUrl(url) : String(url)
  }\``
  if (typeof url !== "string" || !URL.canParse(url)) return expected
  const parsed = new URL(url)
  return parsed.protocol === "http:" || parsed.protocol === "https:" ? parsed : expected
}
