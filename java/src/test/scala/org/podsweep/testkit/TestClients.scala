package org.podsweep.testkit

import io.fabric8.kubernetes.client.{Config, ConfigBuilder, KubernetesClient, KubernetesClientBuilder}
import io.fabric8.kubernetes.client.okhttp.OkHttpClientFactory

/** fabric8 clients for the harness's plain-HTTP API servers. */
object TestClients {
  /**
   * A client of the API server at `url` with its own identity (bearer `token`): no request retries,
   * watches reconnect after 200 ms; `onlyHttpWatches` for servers that do not speak WebSocket.
   */
  def forUrl(url: String, token: String, onlyHttpWatches: Boolean = false): KubernetesClient = {
    val config: Config = new ConfigBuilder(Config.empty())
      .withMasterUrl(url)
      .withOauthToken(token)
      .withNamespace("default")
      .withRequestRetryBackoffLimit(0)
      .withWatchReconnectInterval(200)
      .build()
    if (onlyHttpWatches) config.setOnlyHttpWatches(true)
    new KubernetesClientBuilder().withConfig(config).withHttpClientFactory(new OkHttpClientFactory()).build()
  }
}
